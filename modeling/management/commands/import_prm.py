"""Register a PRM (or an ORM) trained elsewhere as a model version: gate it and, if asked,
activate it (a PRM only)."""

import re
import textwrap
from argparse import RawDescriptionHelpFormatter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.services import importing
from modeling.training.backbones import NAMED_BACKBONES
from modeling.training.external import MATH_SHEPHERD

HELP = (
    "Import a PRM trained elsewhere: a Hugging Face model folder or a LoRA adapter.",
    "Read: config.json (architecture, labels, step_separator, sizes), the weights' headers "
    "(safetensors; .bin by size), the tokenizer's files; for an adapter adapter_config.json and "
    "adapter_model.safetensors's header, then the base's files. Never read or run: "
    "training_args.bin (a pickle), Python files of the model's own (auto_map: refused).",
    "Token classification (TRL's PRMTrainer layout: 2 labels, or 3 with id2label -1/0/+1): the "
    "step separator is config.json's step_separator (our HF export writes it). TRL saves it "
    "nowhere else that is read (README.md and trainer_state.json do not carry it), so without "
    "it the import is refused until --step-separator gives the one the model was trained with.",
    "A LoRA adapter (adapter_config.json and adapter_model.safetensors, no config.json; task "
    "TOKEN_CLS or CAUSAL_LM) is merged into its base with peft: --base FOLDER, else "
    "adapter_config.json's base_model_name_or_path when that is a named backbone "
    f"({', '.join(NAMED_BACKBONES)}) or a model in the local Hugging Face cache (never a folder "
    "it names).",
    "A Math-Shepherd-style causal LM is read at step tags. The folder is checked, copied into "
    "the artifacts and registered as a model version, then gated on the current evaluation set "
    "against the active model (as a trained model is); --activate makes it active if it passes.",
    "An outcome model (…ForSequenceClassification: our ORM export, or a reward model with one "
    "score, TRL's RewardTrainer) is read on the token-classification text, its score at the last "
    "step's separator (the separator found as above). It is gated as a trained ORM is, on solution "
    "AUROC of the evaluation set's graded solutions, compared by best-of-N and never active.",
)
ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\"}


def escaped_text(value: str) -> str:
    r"""A separator as typed on a command line: \n, \t, \r and \\ are the characters."""
    return re.sub(r"\\[ntr\\]", lambda m: ESCAPES[m.group()], value)


class Command(BaseCommand):
    help = "\n\n".join(textwrap.fill(paragraph, 88, break_on_hyphens=False) for paragraph in HELP)

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = RawDescriptionHelpFormatter  # the help's paragraphs kept
        return parser

    def add_arguments(self, parser):
        parser.add_argument(
            "path", help="The model folder (config.json, weights, tokenizer) or adapter folder."
        )
        add_project_argument(parser, "The project it is a model of: its")
        parser.add_argument(
            "--name",
            default="",
            help="The version's name (default: 'imported' and the folder's name, made distinct "
            "with (2), (3)...); a name another version has is refused.",
        )
        parser.add_argument(
            "--step-separator",
            type=escaped_text,
            help="Token or sequence classification: the text after each step the model was "
            "trained with "
            "(TRL's PRMConfig.step_separator, default '\\n'); required when config.json has no "
            "step_separator, refused when it differs from it. \\n, \\t, \\r and \\\\ are read "
            "as those characters: --step-separator '\\n\\n'.",
        )
        parser.add_argument(
            "--base",
            type=Path,
            help="LoRA adapter only: the base model folder to merge it into, in place of "
            "adapter_config.json's base_model_name_or_path.",
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
        base = o["base"].expanduser().resolve() if o["base"] is not None else None
        try:
            version = importing.import_model_version(
                folder=folder.resolve(),
                name=o["name"],
                step_separator=o["step_separator"],
                step_tag=o["step_tag"],
                good_token=o["good_token"],
                bad_token=o["bad_token"],
                base=base,
                check_load=True,
                project_id=project_from_option(o["project"]).pk,
            )
        except (importing.ModelImportError, OSError) as exc:
            raise CommandError(str(exc)) from None
        manifest = version.metrics["imported"]
        read = ""
        if "step_separator" in manifest:
            read = (
                f", step separator {manifest['step_separator']!r} "
                f"({manifest['step_separator_from']})"
            )
        if "adapter" in manifest:
            read += f", a LoRA adapter merged into {base or manifest['adapter']['base_model']}"
        self.stdout.write(
            f"Imported {folder} as model version {version.pk} {version.name!r} "
            f"({version.get_kind_display()}{read}): {version.artifact_path}"
        )
        version = importing.gate_model_version(version.pk, activate=o["activate"])
        gate = version.metrics["gate"]
        verdict = "passed" if gate["passed"] else f"did not pass: {gate['reason']}"
        if version.is_outcome:
            self.stdout.write(
                f"Gate (an ORM: solution AUROC of correctness): AUROC {gate['auroc']}; {verdict}. "
                "An ORM is compared by best-of-N, never made active."
            )
            return
        self.stdout.write(
            f"Gate ({gate['comparison']}): AUROC {gate['auroc']}, active {gate['active_auroc']}; "
            f"{verdict}"
        )
        if version.is_active:
            self.stdout.write(f"Model version {version.pk} is now active.")
