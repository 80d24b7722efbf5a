"""Pre-label a batch's solutions, or the candidate pool's, with a judge (prm, llm or mc):
labeling.PreLabel rows."""

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from labeling.models import Batch
from modeling.models import PreLabelRun
from modeling.services import prelabeling
from modeling.training.cli import positive_int


class Command(BaseCommand):
    help = (
        "Start a pre-label run: a judge labels every step of a batch's solutions (prm: a model "
        "version, the active one by default, thresholds chosen on the current evaluation set; "
        "llm: a ProcessBench-style critic through the generator; mc: Math-Shepherd rollouts, "
        "k per step). Sent to its queue (gpu for prm, generate for llm and mc) and followed on "
        "/modeling/prelabel-runs/; --wait runs it here with progress lines instead."
    )

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--batch", help="The batch's name.")
        target.add_argument(
            "--pool",
            action="store_true",
            help="The candidate pool's selectable solutions (what the disagreement rule ranks).",
        )
        add_project_argument(parser)
        parser.add_argument("--judge", required=True, choices=["prm", "llm", "mc"])
        parser.add_argument("--k", type=positive_int, help="mc: completions per step.")
        parser.add_argument("--max-steps", type=positive_int, help="mc: steps per solution.")
        parser.add_argument("--max-solutions", type=positive_int, help="At most this many.")
        parser.add_argument("--max-tokens", type=positive_int, help="llm, mc: per completion.")
        parser.add_argument("--model-version", type=positive_int, help="prm: its id.")
        parser.add_argument("--wait", action="store_true", help="Run it here and wait.")

    def handle(self, *args, **options):
        project = project_from_option(options["project"])
        batch = None
        if not options["pool"]:
            batch = Batch.objects.filter(name=options["batch"], project=project).first()
            if batch is None:
                raise CommandError(f"There is no batch named {options['batch']!r}.")
        judge = options["judge"]
        given = {
            "k": options["k"],
            "max_steps": options["max_steps"],
            "max_solutions": options["max_solutions"],
            "max_tokens": options["max_tokens"],
            "model_version": options["model_version"],
        }
        chosen = {name: value for name, value in given.items() if value is not None}
        unknown = sorted(set(chosen) - prelabeling.OPTIONS[judge])
        if unknown:
            flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
            raise CommandError(f"The {judge} judge takes no {flags}.")
        try:
            run = prelabeling.start_prelabel_run(
                batch=batch,
                judge=judge,
                created_by=None,
                options=chosen,
                send=not options["wait"],
                project=project,
            )
        except prelabeling.PrelabelError as exc:
            raise CommandError(str(exc)) from exc
        estimate = ", ".join(f"{value} {name}" for name, value in run.estimate.items())
        where = "the candidate pool" if batch is None else f"batch {batch.name}"
        self.stdout.write(f"Pre-label run {run.pk} ({judge}) on {where}: {estimate}")
        if not options["wait"]:
            self.stdout.write("Sent to its queue; follow it on /modeling/prelabel-runs/.")
            return
        finished = prelabeling.execute_prelabel_run(run.pk, progress=self._progress)
        if finished is None:
            raise CommandError(f"Pre-label run {run.pk} is being run elsewhere.")
        self.stdout.write(
            f"Pre-label run {run.pk} {finished.status}: {finished.done}/{finished.total} judged, "
            f"{finished.no_label} with no label"
        )
        if finished.status != PreLabelRun.Status.SUCCEEDED:
            raise CommandError(f"Pre-label run {run.pk} {finished.status}: {finished.error}")

    def _progress(self, run: PreLabelRun) -> None:
        run.refresh_from_db(fields=["done", "no_label"])
        self.stdout.write(f"  {run.done}/{run.total} judged, {run.no_label} with no label")
