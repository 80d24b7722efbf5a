"""Compare model versions by best-of-N, recorded as a BestOfNComparison (like one started from
the page). Runs here, or on the gpu worker with --queue."""

import json

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.models import BestOfNComparison, SamplingRun
from modeling.services import best_of_n


class Command(BaseCommand):
    help = (
        "Best-of-N accuracy of model versions side by side (PRM product, min and weighted "
        "majority, ORM, majority voting, pass@N) on a sampling run's solutions or a best-of-N "
        "file under STEPWISE_DATA_ROOT. Models not on equal footing (backbone, training "
        "problems, optimizer steps) are refused unless --allow-mismatch."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--models", required=True, help="Model version ids, comma-separated (e.g. 3,5)."
        )
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--sampling-run", type=int, metavar="ID")
        source.add_argument("--input", metavar="FILE", help="A best-of-N file under the data root.")
        parser.add_argument("--n", type=int, action="append", default=[], help="An N (repeat).")
        parser.add_argument("--allow-mismatch", action="store_true")
        add_project_argument(parser, "The models' project: its")
        parser.add_argument(
            "--queue", action="store_true", help="Send it to the gpu worker and return."
        )

    def handle(self, *args, **o):
        project = project_from_option(o["project"])
        sampling_run = None
        if o["sampling_run"] is not None:
            sampling_run = SamplingRun.objects.filter(pk=o["sampling_run"], project=project).first()
            if sampling_run is None:
                raise CommandError(f"no sampling run {o['sampling_run']}")
        try:
            comparison = best_of_n.comparison_start(
                model_ids=[part for part in o["models"].split(",") if part.strip()],
                sampling_run=sampling_run,
                input_path=o["input"] or "",
                ns=o["n"],
                allow_mismatch=o["allow_mismatch"],
                send=o["queue"],
                project_id=project.pk,
            )
        except best_of_n.ComparisonError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"best-of-N comparison {comparison.pk}: {comparison.status}")
        if o["queue"]:
            return
        comparison = best_of_n.comparison_run(comparison.pk)
        if comparison.status != BestOfNComparison.Status.SUCCEEDED:
            raise CommandError(f"best-of-N comparison {comparison.pk} failed: {comparison.error}")
        report = comparison.report
        self.stdout.write(json.dumps({k: report[k] for k in ("models", "footing", "overlap")}))
        for method, rows in report["methods"].items():
            if rows:
                last = rows[-1]
                self.stdout.write(
                    f"{method}: N={last['n']} {last['accuracy']:.3f} "
                    f"[{last['low']:.3f}, {last['high']:.3f}]"
                )
        self.stdout.write(f"PNG: MEDIA_ROOT/{comparison.png_path}")
