from django.core.management.base import BaseCommand

from labeling.management.importing import run_import
from labeling.management.projects import add_project_argument, project_from_option
from labeling.services.importing import import_samples


class Command(BaseCommand):
    help = (
        "Import generator solutions to label into a batch (JSONL: problem or unique_id, steps, "
        "answer, generator, source_id, score)."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+")
        add_project_argument(parser, "The batch's project: its")
        parser.add_argument("--batch", required=True, help="Batch name (created if new).")
        parser.add_argument("--overlap", type=int, default=1, help="Labels wanted per solution.")
        parser.add_argument("--generation", type=int, default=None)
        parser.add_argument(
            "--skip-invalid", action="store_true", help="Skip and report bad lines."
        )

    def handle(self, *args, paths, batch, overlap, generation, skip_invalid, project, **options):
        project_id = project_from_option(project).pk
        run_import(
            self,
            paths,
            lambda p: import_samples(
                p,
                batch_name=batch,
                overlap=overlap,
                generation=generation,
                skip_invalid=skip_invalid,
                project_id=project_id,
            ),
        )
