"""Export labelings (PRM800K JSONL or stepwise training rows) to a file, with a progress bar."""

import shutil
import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from labeling.management.projects import add_project_argument, project_from_option
from labeling.models import FinishReason, Snapshot
from labeling.prm800k import NEUTRAL_MAPPINGS
from labeling.serializers import ExportRequestSerializer
from labeling.services import snapshots
from labeling.services.exporting import (
    LABEL_CHOICES,
    export_format_for,
    select_labelings,
    write_export_file,
)


class Command(BaseCommand):
    help = (
        "Export labelings to --output: the PRM800K release format (byte exact) or TRL stepwise "
        "rows (JSONL/Parquet). Only completed labelings unless --include-incomplete. With "
        "--snapshot the export is recorded as an immutable snapshot (and written under MEDIA_ROOT)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--output", "-o", help="File to write (required unless --snapshot).")
        parser.add_argument(
            "--format",
            choices=[c for c, _ in Snapshot.Format.choices],
            help="Default: from --output's extension (.parquet: stepwise_parquet), "
            "else prm800k. A format the extension contradicts is refused.",
        )
        parser.add_argument(
            "--batch", type=int, action="append", default=[], help="Batch id (repeatable)."
        )
        parser.add_argument(
            "--generation", type=int, action="append", default=[], help="Repeatable."
        )
        parser.add_argument("--finished-after", help="ISO date/time, inclusive.")
        parser.add_argument("--finished-before", help="ISO date/time, exclusive.")
        parser.add_argument(
            "--labeler", action="append", default=[], help="Username or public id (repeatable)."
        )
        parser.add_argument(
            "--finish-reason", action="append", default=[], choices=FinishReason.values
        )
        parser.add_argument(
            "--quality-control", default="include", choices=["include", "exclude", "only"]
        )
        parser.add_argument(
            "--screening", default="include", choices=["include", "exclude", "only"]
        )
        parser.add_argument(
            "--include-incomplete",
            action="store_true",
            help="Also in-progress and expired labelings (default: completed only).",
        )
        parser.add_argument(
            "--since-snapshot", type=int, help="Only labelings created or changed after it."
        )
        parser.add_argument("--neutral", default="positive", choices=NEUTRAL_MAPPINGS)
        parser.add_argument(
            "--no-alternatives", action="store_true", help="Stepwise: main path rows only."
        )
        parser.add_argument(
            "--labels",
            default="final",
            choices=LABEL_CHOICES,
            help="Stepwise: one final row per adjudicated or multiply labeled solution "
            "(final), or every labeling's rows (every).",
        )
        parser.add_argument(
            "--test-fraction", type=float, default=0.0, help="Stepwise: share of problems in test."
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--snapshot", action="store_true", help="Record an immutable snapshot.")
        parser.add_argument("--no-progress", action="store_true")
        add_project_argument(parser, "The project exported: its")

    def handle(self, *args, **opts):
        try:
            fmt = export_format_for(opts["output"], opts["format"])
        except ValueError as exc:
            raise CommandError(
                f"--format {opts['format']} does not fit --output {opts['output']}: {exc}; nothing was written"
            ) from None
        data = {
            "format": fmt,
            "batch": opts["batch"],
            "generation": opts["generation"],
            "finished_after": opts["finished_after"],
            "finished_before": opts["finished_before"],
            "labeler": opts["labeler"],
            "finish_reason": opts["finish_reason"],
            "quality_control": opts["quality_control"],
            "screening": opts["screening"],
            "complete_only": not opts["include_incomplete"],
            "since_snapshot": opts["since_snapshot"],
            "neutral": opts["neutral"],
            "alternatives": not opts["no_alternatives"],
            "labels": opts["labels"],
            "test_fraction": opts["test_fraction"],
            "seed": opts["seed"],
        }
        project = project_from_option(opts["project"])
        request = ExportRequestSerializer(data=data, context={"project_id": project.pk})
        if not request.is_valid():
            problems = "; ".join(
                f"{name}: {' '.join(map(str, errs))}" for name, errs in request.errors.items()
            )
            raise CommandError(f"invalid export request: {problems}")
        if not opts["output"] and not opts["snapshot"]:
            raise CommandError("give --output PATH (or --snapshot)")
        fmt = request.validated_data["format"]
        filters, options = request.export_filters(), request.stepwise_options()
        labelings = select_labelings(filters)
        bar = tqdm(
            total=labelings.count(),
            unit=" labelings",
            file=sys.stderr,
            disable=opts["no_progress"],
            dynamic_ncols=True,
        )
        try:
            if opts["snapshot"]:
                snapshot = snapshots.snapshot_create(
                    user=None, fmt=fmt, filters=filters, options=options, enqueue=False
                )
                snapshot = snapshots.snapshot_run(
                    snapshot_id=snapshot.pk,
                    progress=bar.update,
                    on_total=lambda n: setattr(bar, "total", n),
                )
                if snapshot.status != Snapshot.Status.DONE:
                    raise CommandError(
                        f"snapshot {snapshot.pk} {snapshot.status}: {snapshot.error}"
                    )
                path = snapshots.snapshot_file(snapshot)
                if opts["output"]:
                    shutil.copyfile(path, opts["output"])
                summary = (
                    f"snapshot {snapshot.pk}: {snapshot.row_count} rows, "
                    f"{snapshot.step_label_count} step labels, sha256 {snapshot.sha256}"
                )
            else:
                result = write_export_file(
                    opts["output"], fmt, labelings, options=options, progress=bar.update
                )
                summary = (
                    f"{opts['output']}: {result.rows} rows from {result.labelings} labelings, "
                    f"{result.step_labels} step labels, sha256 {result.sha256}"
                )
        finally:
            bar.close()
        self.stdout.write(self.style.SUCCESS(summary))
