"""Machine labels on a batch (issue 47): set a lead's settings and accept what the judges agree
on, or print the audited precision."""

from django.core.management.base import BaseCommand, CommandError

from labeling import selectors
from labeling.management.projects import add_project_argument, project_from_option
from labeling.models import Batch
from labeling.services import machine_labels
from labeling.services.errors import LabelingError


class Command(BaseCommand):
    help = (
        "Machine labels on a batch: where every judge (at least two) gives a solution the same "
        "labels with at least --min-confidence on every step, the judges' labels become a "
        "machine labeling; --audit-share of them (seeded) still go to humans. Prints the "
        "audited precision per batch and per judge with a 95% Wilson interval."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", required=True, help="The batch's name.")
        add_project_argument(parser, "The batch's project: its")
        switch = parser.add_mutually_exclusive_group()
        switch.add_argument("--on", action="store_true", help="Turn machine labels on.")
        switch.add_argument("--off", action="store_true", help="Turn machine labels off.")
        parser.add_argument("--min-confidence", type=float, default=None)
        parser.add_argument("--audit-share", type=float, default=None)
        parser.add_argument("--audit-seed", type=int, default=None)
        parser.add_argument(
            "--accept", action="store_true", help="Accept the agreeing solutions now."
        )

    def handle(self, *args, **o):
        project = project_from_option(o["project"])
        batch = Batch.objects.filter(name=o["batch"], project=project).first()
        if batch is None:
            raise CommandError(f"There is no batch named {o['batch']!r} in {project.slug!r}.")
        try:
            if (
                o["on"]
                or o["off"]
                or any(
                    o[name] is not None for name in ("min_confidence", "audit_share", "audit_seed")
                )
            ):
                machine_labels.set_machine_settings(
                    batch=batch,
                    enabled=o["on"] or (batch.machine_labels and not o["off"]),
                    min_confidence=_or(o["min_confidence"], batch.machine_min_confidence),
                    audit_share=_or(o["audit_share"], batch.machine_audit_share),
                    audit_seed=_or(o["audit_seed"], batch.machine_audit_seed),
                )
            if o["accept"]:
                report = machine_labels.accept_machine_labels(batch=batch)
                self.stdout.write(
                    f"Accepted {report['accepted']} machine labelings ({report['audited']} "
                    f"audited) of {report['considered']} unlabeled solutions."
                )
        except LabelingError as exc:
            raise CommandError(str(exc)) from None
        summary = selectors.machine_label_precision(batch)
        state = "on" if batch.machine_labels else "off"
        self.stdout.write(
            f"Batch {batch.name}: machine labels {state} (min confidence "
            f"{batch.machine_min_confidence:g}, audit share {batch.machine_audit_share:g}, seed "
            f"{batch.machine_audit_seed}); {summary.accepted} machine labelings, "
            f"{summary.audited} audited, {summary.checked} checked"
        )
        for row in [summary.batch, *summary.judges]:
            share = "-" if row.share is None else f"{row.share:.3f}"
            self.stdout.write(
                f"  precision {row.name}: {share} [{row.low:.3f}, {row.high:.3f}] "
                f"({row.right}/{row.checked})"
            )


def _or(value, default):
    return default if value is None else value
