from django.core.management.base import BaseCommand
from tqdm import tqdm

from labeling.services.exporting import store_release_lines


class Command(BaseCommand):
    help = (
        "Render and store the PRM800K line of completed labelings that have none, so exports "
        "stream it (after an upgrade, or after many edits)."
    )

    def handle(self, *args, **options):
        bar = tqdm(unit="labelings", file=self.stderr)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        stored = store_release_lines(progress=progress)
        bar.close()
        self.stdout.write(self.style.SUCCESS(f"stored {stored} release lines"))
