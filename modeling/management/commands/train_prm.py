"""Train a PRM on the database's labelings and any data files, recorded as a TrainingRun (like a
run started from the page). Runs here with progress bars, or on the gpu worker with --queue."""

import dataclasses
import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.models import SamplingRun, TrainingRun
from modeling.services import execution, runs
from modeling.training.cli import config_parser, tqdm_counter, tqdm_progress
from modeling.training.config import TrainConfig


class Command(BaseCommand):
    help = (
        "Train a process reward model on completed labelings (all, or --batch / --generation), "
        "evaluate it on held-out problems and activate it if it passes the gate. Every "
        "TrainConfig field is a flag. For files instead of the database: python -m "
        "modeling.training.cli train. --objective outcome trains an outcome model (ORM) on the "
        "graded solutions Stepwise holds (or one --sampling-run's)."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        return super().create_parser(prog_name, subcommand, parents=[config_parser()], **kwargs)

    def add_arguments(self, parser):
        parser.add_argument(
            "--sampling-run",
            type=int,
            metavar="ID",
            help="--objective outcome: train on this sampling run's graded solutions only.",
        )
        parser.add_argument("--name", default="", help="A name for the run.")
        parser.add_argument(
            "--batch", type=int, action="append", default=[], help="Batch id (repeat)."
        )
        parser.add_argument(
            "--generation", type=int, action="append", default=[], help="Generation (repeat)."
        )
        parser.add_argument(
            "--holdout-fraction",
            type=float,
            default=None,
            help="Share of problems held out for evaluation (default STEPWISE_PRM_HOLDOUT_FRACTION).",
        )
        parser.add_argument(
            "--processbench", action="append", default=[], help="ProcessBench JSON (repeat)."
        )
        parser.add_argument(
            "--data",
            action="append",
            default=[],
            metavar="PATH",
            help="Training data of any shape (PRM800K, stepwise-critic, TRL stepwise supervision, "
            "Math-Shepherd; docs/training.md 'Training data shapes') beside the labelings (repeat).",
        )
        parser.add_argument(
            "--no-labelings",
            action="store_true",
            help="Train on the --data files alone, no labelings of this database.",
        )
        parser.add_argument(
            "--no-activate", action="store_true", help="Never make it the active model."
        )
        parser.add_argument(
            "--queue", action="store_true", help="Send it to the gpu worker and return."
        )
        parser.add_argument(
            "--resume", type=int, metavar="RUN", help="Resume this failed or cancelled run."
        )
        add_project_argument(
            parser, "Whose labels and model (not with --resume: the run's): the project's"
        )

    def handle(self, *args, **o):
        try:
            if o["resume"] is not None:
                run = runs.resume_training_run(
                    TrainingRun.objects.get(pk=o["resume"]), send=o["queue"]
                )
            else:
                project = project_from_option(o["project"])
                config = {f.name: o[f.name] for f in dataclasses.fields(TrainConfig)}
                config["backbone"] = runs.allowed_backbone(config["backbone"])
                sampling_run = None
                if o["sampling_run"] is not None:
                    sampling_run = SamplingRun.objects.filter(
                        pk=o["sampling_run"], project=project
                    ).first()
                    if sampling_run is None:
                        raise runs.RunError(f"no sampling run {o['sampling_run']}")
                kwargs = dict(
                    config=config,
                    name=o["name"],
                    holdout_fraction=o["holdout_fraction"],
                    # Only the filters given: with --no-labelings any of them is refused.
                    filters={
                        name: ids
                        for name, ids in (("batches", o["batch"]), ("generations", o["generation"]))
                        if ids
                    },
                    processbench=o["processbench"],
                    data_files=[str(Path(path).resolve()) for path in o["data"]],
                    use_labelings=not o["no_labelings"],
                    activate=not o["no_activate"],
                    sampling_run=sampling_run,
                    project=project,
                )
                start = runs.start_training_run if o["queue"] else runs.create_training_run
                run = start(**kwargs)
        except (runs.RunError, TrainingRun.DoesNotExist) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"training run {run.pk}: {run.status}")
        if o["queue"]:
            return
        version = execution.execute_training_run(
            run.pk, progress=tqdm_progress(), counter=tqdm_counter
        )
        run.refresh_from_db()
        if run.status != TrainingRun.Status.SUCCEEDED:
            raise CommandError(f"training run {run.pk} {run.status}: {run.error}")
        gate = run.metrics.get("gate", {})
        summary = {
            "run": run.pk,
            "model_version": version.pk,
            "active": version.is_active,
            "dataset_version": run.dataset_version,
            "final_loss": run.metrics.get("final_loss"),
            "objective": run.objective,
            "held_out_auroc": run.metrics.get("auroc"),
            "held_out_solution_auroc": run.metrics.get("solution_auroc"),
            "gate": gate,
        }
        self.stdout.write(json.dumps(summary, indent=2))
