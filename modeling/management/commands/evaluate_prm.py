"""Measure a model version: its run's held-out problems, ProcessBench subsets, best-of-N."""

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.models import ModelVersion
from modeling.services import evaluation
from modeling.training.cli import positive_int, tqdm_counter
from modeling.training.evaluate import best_of_n_table, dropped_labels_note, report_json


class Command(BaseCommand):
    help = (
        "Evaluate a model version (default: the active one) on its run's held-out problems "
        "(step AUROC, accuracy, calibration), on ProcessBench files (F1) and on a best-of-N "
        "samples file (accuracy of the PRM's pick, the last step's, majority vote), store the report "
        "on the version and print it. For files instead: python -m modeling.training.cli evaluate."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--model-version", type=int, help="ModelVersion id (default: the active model)."
        )
        add_project_argument(parser, "Whose active model, without --model-version: the project's")
        parser.add_argument(
            "--processbench", action="append", default=[], help="ProcessBench JSON (repeat)."
        )
        parser.add_argument(
            "--best-of-n",
            metavar="SAMPLES_JSONL",
            help="N sampled solutions per problem (format: docs/training.md); prints accuracy "
            "of the PRM's pick (product rule), the last step's and majority vote at N = 1, 2, 4, …",
        )
        parser.add_argument(
            "--n",
            type=positive_int,
            action="append",
            dest="best_of_n_sizes",
            help="A best-of-N size (repeat; default: 1, 2, 4, … up to the most samples).",
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
            else ModelVersion.objects.filter(
                is_active=True, project=project_from_option(o["project"])
            ).first()
        )
        if version is None:
            raise CommandError("no such model version" if o["model_version"] else "no active model")
        try:
            report = evaluation.evaluate_model_version(
                version,
                processbench=o["processbench"],
                threshold=o["threshold"],
                save=not o["no_save"],
                counter=tqdm_counter,
                max_length=o["max_length"],
                best_of_n=o["best_of_n"],
                best_of_n_sizes=o["best_of_n_sizes"],
            )
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot evaluate {version}: {exc}") from None
        if report.get("held_out"):
            self.stderr.write(dropped_labels_note(report["held_out"]))
        if report.get("best_of_n"):
            self.stdout.write(f"Best of N on {report['best_of_n']['file']}:")
            self.stdout.write(best_of_n_table(report["best_of_n"]["curve"]) + "\n")
        self.stdout.write(report_json(report))
