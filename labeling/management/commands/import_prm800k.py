from django.core.management.base import BaseCommand

from labeling.management.importing import run_import
from labeling.management.projects import add_project_argument, project_from_option
from labeling.services.importing import import_prm800k


class Command(BaseCommand):
    help = "Import PRM800K label JSONL (phase 1 and 2). Re-importing a file adds nothing twice."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        add_project_argument(parser, "The project the lines go into: its")
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Skip and report bad lines."
        )

    def handle(self, *args, paths, skip_invalid, project, **options):
        project_id = project_from_option(project).pk
        run_import(
            self,
            paths,
            lambda p: import_prm800k(p, skip_invalid=skip_invalid, project_id=project_id),
        )
