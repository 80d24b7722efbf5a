"""Machine labels' audited precision on the lead's batch page (issue 47), live: per batch and per
judge, the share of audited machine labelings a human's labeling of the same solution confirms
(`agreement.machine_label_correct`), with a 95% Wilson interval."""

from __future__ import annotations

from dataclasses import dataclass

from labeling import agreement
from labeling.models import Batch, Labeling
from labeling.selectors.ratings import labeling_step_ratings


@dataclass(frozen=True)
class Precision:
    name: str  # "batch" or a judge's name
    right: int
    checked: int
    low: float
    high: float

    @property
    def share(self) -> float | None:
        return self.right / self.checked if self.checked else None


@dataclass(frozen=True)
class MachineLabelSummary:
    accepted: int  # machine labelings of the batch, audited ones included
    audited: int  # of them sent to humans
    checked: int  # audited ones a human has finished
    batch: Precision
    judges: list[Precision]


def machine_label_precision(batch: Batch) -> MachineLabelSummary:
    """The batch's machine labelings and their audited precision (four queries)."""
    machine = list(
        Labeling.objects.filter(solution__batch=batch, source=Labeling.Source.MACHINE).values_list(
            "pk", "solution_id", "machine_audit", "machine_judges"
        )
    )
    audited = {solution_id: (pk, judges) for pk, solution_id, audit, judges in machine if audit}
    humans = (
        Labeling.objects.filter(
            solution_id__in=audited,
            source=Labeling.Source.HUMAN,
            status=Labeling.Status.COMPLETED,
        )
        .order_by("solution_id", "-finished_at", "-pk")
        .values_list("pk", "solution_id")
    )
    human_of: dict[int, int] = {}
    for pk, solution_id in humans:
        human_of.setdefault(solution_id, pk)  # the newest finished human labeling
    ratings = labeling_step_ratings([*human_of.values(), *(pk for pk, _ in audited.values())])
    right = checked = 0
    per_judge: dict[str, list[int]] = {}
    for solution_id, human_pk in human_of.items():
        machine_pk, judges = audited[solution_id]
        human = ratings[human_pk]
        checked += 1
        right += agreement.machine_label_correct(ratings[machine_pk], human)
        for judge in judges or []:
            tally = per_judge.setdefault(judge["judge"], [0, 0])
            tally[0] += agreement.machine_label_correct(judge["labels"], human)
            tally[1] += 1
    return MachineLabelSummary(
        accepted=len(machine),
        audited=len(audited),
        checked=checked,
        batch=_precision("batch", right, checked),
        judges=[_precision(name, r, n) for name, (r, n) in sorted(per_judge.items())],
    )


def _precision(name: str, right: int, checked: int) -> Precision:
    low, high = agreement.wilson_interval(right, checked)
    return Precision(name, right, checked, low, high)
