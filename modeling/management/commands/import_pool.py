from django.core.management.base import BaseCommand

from labeling.management.importing import run_import
from labeling.management.projects import add_project_argument, project_from_option
from modeling.services.pool import import_pool


class Command(BaseCommand):
    help = (
        "Import unlabeled candidate solutions into the active-learning pool, grading each answer "
        "against its problem's ground truth (JSONL: unique_id or problem, steps, answer, "
        "generator, source_id, score)."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        add_project_argument(parser, "Whose pool: the project's")
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Skip and report bad lines."
        )

    def handle(self, *args, paths, skip_invalid, project, **options):
        project_id = project_from_option(project).pk
        run_import(
            self, paths, lambda p: import_pool(p, skip_invalid=skip_invalid, project_id=project_id)
        )
