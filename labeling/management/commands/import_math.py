from django.core.management.base import BaseCommand

from labeling.management.importing import run_import
from labeling.services.importing import import_math


class Command(BaseCommand):
    help = "Import MATH problems (JSONL: problem, solution, answer, subject, level, unique_id)."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Skip and report bad lines."
        )

    def handle(self, *args, paths, skip_invalid, **options):
        run_import(self, paths, lambda p: import_math(p, skip_invalid=skip_invalid))
