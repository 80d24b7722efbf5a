"""Measure a model version: its run's held-out problems and ProcessBench subsets."""

from django.core.management.base import BaseCommand, CommandError

from modeling.models import ModelVersion
from modeling.services import runs
from modeling.training.cli import positive_int, tqdm_counter
from modeling.training.evaluate import dropped_labels_note, report_json


class Command(BaseCommand):
    help = (
        "Evaluate a model version (default: the active one) on its run's held-out problems "
        "(step AUROC, accuracy, calibration) and on ProcessBench files (F1), store the report "
        "on the version and print it. For files instead: python -m modeling.training.cli evaluate."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--model-version", type=int, help="ModelVersion id (default: the active model)."
        )
        parser.add_argument(
            "--processbench", action="append", default=[], help="ProcessBench JSON (repeat)."
        )
        parser.add_argument(
            "--threshold",
            type=float,
            default=0.5,
            help="First error = first step with P(+1)+P(0) under this.",
        )
        parser.add_argument(
            "--max-length",
            type=positive_int,
            help="Tokens per packed row; labels past it are dropped (default: the model's).",
        )
        parser.add_argument(
            "--no-save", action="store_true", help="Print only; do not store the report."
        )

    def handle(self, *args, **o):
        version = (
            ModelVersion.objects.filter(pk=o["model_version"]).first()
            if o["model_version"] is not None
            else ModelVersion.active()
        )
        if version is None:
            raise CommandError("no such model version" if o["model_version"] else "no active model")
        try:
            report = runs.evaluate_model_version(
                version,
                processbench=o["processbench"],
                threshold=o["threshold"],
                save=not o["no_save"],
                counter=tqdm_counter,
                max_length=o["max_length"],
            )
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot evaluate {version}: {exc}") from None
        if report.get("held_out"):
            self.stderr.write(dropped_labels_note(report["held_out"]))
        self.stdout.write(report_json(report))
