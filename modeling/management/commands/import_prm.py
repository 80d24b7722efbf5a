"""Register a PRM trained elsewhere as a model version: gate it and, if asked, activate it."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from modeling.services import importing
from modeling.training.external import MATH_SHEPHERD, TRL_SEPARATOR


class Command(BaseCommand):
    help = (
        "Import a PRM trained elsewhere (a Hugging Face model folder): a token-classification "
        "PRM in TRL's layout (2 labels, or 3 with id2label -1/0/+1) or a Math-Shepherd-style "
        "causal LM read at step tags. The folder is checked, copied into the artifacts and "
        "registered as a model version, then gated on the current evaluation set against the "
        "active model (as a trained model is); --activate makes it active if it passes."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="The model folder (config.json, weights, tokenizer).")
        parser.add_argument("--name", default="", help="The version's name (default: the folder).")
        parser.add_argument(
            "--step-separator",
            help=f"Token classification: the text after each step, when config.json has no "
            f"step_separator (default {TRL_SEPARATOR!r}, TRL's).",
        )
        parser.add_argument(
            "--step-tag",
            default=MATH_SHEPHERD["step_tag"],
            help="Step-tag LM: the tag after each step (default %(default)r, Math-Shepherd's).",
        )
        parser.add_argument(
            "--good-token", default=MATH_SHEPHERD["good_token"], help="default %(default)r"
        )
        parser.add_argument(
            "--bad-token", default=MATH_SHEPHERD["bad_token"], help="default %(default)r"
        )
        parser.add_argument(
            "--activate", action="store_true", help="Make it the active model if it passes."
        )

    def handle(self, *args, **o):
        folder = Path(o["path"]).expanduser()
        try:
            version = importing.import_model_version(
                folder=folder.resolve(),
                name=o["name"],
                step_separator=o["step_separator"],
                step_tag=o["step_tag"],
                good_token=o["good_token"],
                bad_token=o["bad_token"],
                check_load=True,
            )
        except (importing.ModelImportError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Imported {folder} as model version {version.pk} ({version.get_kind_display()}): "
            f"{version.artifact_path}"
        )
        version = importing.gate_model_version(version.pk, activate=o["activate"])
        gate = version.metrics["gate"]
        verdict = "passed" if gate["passed"] else f"did not pass: {gate['reason']}"
        self.stdout.write(
            f"Gate ({gate['comparison']}): AUROC {gate['auroc']}, active {gate['active_auroc']}; "
            f"{verdict}"
        )
        if version.is_active:
            self.stdout.write(f"Model version {version.pk} is now active.")
