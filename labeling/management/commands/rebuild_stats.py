from django.core.management.base import BaseCommand, CommandError

from labeling.models import Batch
from labeling.services.counters import rebuild_batch_stats


class Command(BaseCommand):
    help = (
        "Recount the lead dashboard's per-batch counters (per labeler, per hour) from the "
        "completed labelings. Imports do this themselves; use it after a repair by hand."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--batch", type=int, action="append", default=[], help="Batch id (repeat; default all)."
        )

    def handle(self, *args, batch, **options):
        batches = Batch.objects.filter(pk__in=batch) if batch else Batch.objects.all()
        if batch and batches.count() != len(set(batch)):
            raise CommandError(f"no such batch among {sorted(set(batch))}")
        for each in batches.order_by("pk"):
            counted = rebuild_batch_stats(each)
            self.stdout.write(f"{each.name}: {counted} labelings counted")
