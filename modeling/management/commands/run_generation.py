import json
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.models import GenerationRun
from modeling.services import loop, pipeline
from modeling.training.selection import RULES


def parse_shares(text: str) -> dict[str, float]:
    """ "convincing_wrong=0.5,uncertainty=0.5" -> {"convincing_wrong": 0.5, "uncertainty": 0.5}"""
    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            shares[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise CommandError(f"--shares: {part!r} is not RULE=SHARE (e.g. uncertainty=0.5)")
    return shares


class Command(BaseCommand):
    help = (
        "Start the next active-learning generation (retrain -> score the pool -> select -> "
        "enqueue) on the Celery workers, or retry a failed one."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--rule",
            choices=RULES,
            default="convincing_wrong",
            help="Selection rule. uncertainty fits an ensemble of heads on a head-mode model "
            "(refused for lora/full models: one training per head); disagreement routes what the "
            "judges' pre-labels and the PRM disagree on (pre-label the pool first).",
        )
        parser.add_argument(
            "--shares",
            default="",
            help="--rule mix: RULE=SHARE,... summing to 1, e.g. convincing_wrong=0.5,uncertainty=0.5",
        )
        parser.add_argument(
            "--ensemble-heads",
            type=int,
            default=None,
            help="Heads in the uncertainty rule's ensemble (default: STEPWISE_ENSEMBLE_HEADS).",
        )
        parser.add_argument("--k", type=int, default=50, help="Solutions to select.")
        parser.add_argument(
            "--fraction", type=float, default=0.8, help="Convincing wrong-answer share."
        )
        parser.add_argument("--per-problem-cap", type=int, default=2, help="0: no cap.")
        parser.add_argument("--scope", choices=["pool", "per_problem"], default="pool")
        parser.add_argument("--per-problem-k", type=int, default=None)
        parser.add_argument("--overlap", type=int, default=1, help="Labelings wanted per solution.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--no-retrain", action="store_true", help="Score with the active model as is."
        )
        parser.add_argument("--train-config", default="{}", help="TrainConfig fields as JSON.")
        parser.add_argument(
            "--retry", type=int, metavar="GENERATION", help="Retry this failed generation."
        )
        add_project_argument(parser)
        parser.add_argument("--inline", action="store_true", help="Run the steps in this process.")
        parser.add_argument(
            "--wait", action="store_true", help="Wait until the run ends; print progress."
        )
        parser.add_argument(
            "--timeout", type=float, default=24 * 3600, help="Seconds --wait waits."
        )

    def handle(self, *args, **o):
        # The embedded default has no worker, and a thread (what its pages use) would stop
        # with this command: the steps run here, as with --inline.
        inline = o["inline"] or settings.STEPWISE_MODEL_TASKS_IN_THREAD
        project = project_from_option(o["project"])
        try:
            if o["retry"] is not None:
                run = loop.retry_generation(
                    GenerationRun.objects.get(generation=o["retry"], project=project),
                    send=not inline,
                )
            else:
                params = {
                    "rule": o["rule"],
                    "shares": parse_shares(o["shares"]) or None,
                    "ensemble_heads": o["ensemble_heads"],
                    "k": o["k"],
                    "convincing_wrong_fraction": o["fraction"],
                    "per_problem_cap": o["per_problem_cap"] or None,
                    "scope": o["scope"],
                    "per_problem_k": o["per_problem_k"],
                    "overlap": o["overlap"],
                    "seed": o["seed"],
                    "retrain": not o["no_retrain"],
                    "train_config": json.loads(o["train_config"]),
                }
                run = loop.start_generation(
                    params=params,
                    trigger=GenerationRun.Trigger.CLI,
                    send=not inline,
                    project_id=project.pk,
                )
        except (
            loop.GenerationError,
            GenerationRun.DoesNotExist,
            json.JSONDecodeError,
        ) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{run}: {run.status} at {run.current_step}")
        if inline:
            run = pipeline.run_generation_inline(run)
        if o["wait"] or inline:
            run = self._wait(run, o["timeout"])
        if run.status == GenerationRun.Status.FAILED:
            raise CommandError(
                f"{run} failed: {run.error} (retry: run_generation --retry {run.generation})"
            )

    def _wait(self, run: GenerationRun, timeout: float) -> GenerationRun:
        deadline, last = time.monotonic() + timeout, None
        while True:
            run.refresh_from_db()
            line = " | ".join(
                f"{s['name']}: {s['status']}"
                + (
                    f" {s['percent']}%"
                    if s.get("percent") is not None and s["status"] == "running"
                    else ""
                )
                for s in run.step_rows()
            )
            if line != last:
                self.stdout.write(line)
                last = line
            if run.is_finished or run.status == GenerationRun.Status.FAILED:
                break
            if time.monotonic() > deadline:
                raise CommandError(f"{run} still {run.status} after {timeout:.0f} s")
            time.sleep(1.0)
        if run.batch_id:
            self.stdout.write(
                self.style.SUCCESS(
                    f"{run}: {run.selections.count()} solutions queued in batch {run.batch.name!r}"
                )
            )
        return run
