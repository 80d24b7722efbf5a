"""Machine labels (issue 47): where every judge agrees, the judges' labels become a labeling.

A lead opts a batch in (`Batch.machine_labels`, with a minimum confidence, an audit share and a
seed). `accept_machine_labels` then takes every solution of the batch that nobody has labeled or
claimed and that is no gold or screening item, and reads the newest pre-label of each judge kind
(prm, llm, mc). It accepts the solution when

- at least two judges labelled it (agreement needs two),
- their labels are the same on every step (PRM800K's stop rule: nothing after the first -1),
- each labels every step up to the end or its first -1 (a gap is no labeling), and
- every judge's score on every labelled step is at least the batch's minimum confidence.

Each accepted solution gets one Labeling by the judges, never by a person: its labeler is the
inactive judges account (no password, in no group: it cannot sign in or claim), its `source` is
machine and `machine_judges` names the pre-labels it came from with their scores. A seeded
audit share of them (`agreement.audit_sample`) is marked `machine_audit` and left in the human
queue; the rest leave it (their solution counts as labeled for the queue). The lead's batch page
shows the audited precision (`selectors.machine_label_precision`). Exports, training and every
human-label count leave machine labelings out unless asked (`ExportFilters.machine_labels`).
"""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from labeling import agreement
from labeling.models import Batch, Completion, FinishReason, Labeling, PreLabel, Solution, StepLabel
from labeling.services.errors import LabelingError

JUDGES_USERNAME = "stepwise-judges"


def judges_user() -> User:
    """The account machine labelings are filed under: inactive, no usable password, no roles."""
    user, made = User.objects.get_or_create(
        username=JUDGES_USERNAME,
        defaults={"is_active": False, "first_name": "Machine judges (not a person)"},
    )
    if made:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def check_machine_settings(
    *, enabled: Any, min_confidence: Any, audit_share: Any, audit_seed: Any
) -> dict[str, Any]:
    """The batch's machine-label settings, or LabelingError naming the first bad one (forms, the
    API and the command call it: NaN, infinities, booleans as numbers and out-of-range values are
    refused)."""

    def number(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LabelingError(f"{name} must be a number from 0 to 1.")
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise LabelingError(f"{name} must be a number from 0 to 1, not {value!r}.")
        return float(value)

    if not isinstance(enabled, bool):
        raise LabelingError("machine_labels must be true or false.")
    if isinstance(audit_seed, bool) or not isinstance(audit_seed, int):
        raise LabelingError("The audit seed must be a whole number.")
    if not -(2**31) <= audit_seed < 2**31:
        raise LabelingError("The audit seed must fit in 32 bits.")
    return {
        "machine_labels": enabled,
        "machine_min_confidence": number("The minimum confidence", min_confidence),
        "machine_audit_share": number("The audit share", audit_share),
        "machine_audit_seed": audit_seed,
    }


def set_machine_settings(*, batch: Batch, **settings: Any) -> Batch:
    """Store checked settings on the batch (LabelingError, writing nothing, when one is bad)."""
    clean = check_machine_settings(**settings)
    for name, value in clean.items():
        setattr(batch, name, value)
    batch.save(update_fields=list(clean))
    return batch


def update_machine_labels(*, batch: Batch, accept: bool, **settings: Any) -> dict[str, int] | None:
    """A lead's change (the batch page and the API): the settings stored and, when asked, what
    now agrees accepted, in one transaction; the acceptance's report, or None."""
    with transaction.atomic():
        set_machine_settings(batch=batch, **settings)
        return accept_machine_labels(batch=batch) if accept else None


def agreed_labels(
    prelabels: list[PreLabel], min_confidence: float
) -> tuple[list[int | None], list[PreLabel]] | None:
    """The labels every judge gives a solution alike, and the pre-labels behind them (the newest
    of each kind), or None when they do not qualify (see the module docstring)."""
    newest: dict[str, PreLabel] = {}
    for prelabel in prelabels:  # newest first
        newest.setdefault(prelabel.kind, prelabel)
    judged = sorted(
        (p for p in newest.values() if any(label is not None for label in p.labels)),
        key=lambda p: p.kind,
    )
    if len(judged) < 2:
        return None
    labels = list(judged[0].labels)
    if any(list(p.labels) != labels for p in judged[1:]):
        return None
    stop = next((i for i, label in enumerate(labels) if label == -1), len(labels) - 1)
    if any(label is None for label in labels[: stop + 1]):
        return None
    for prelabel in judged:
        scores = prelabel.scores[: stop + 1]
        if any(score is None or not score >= min_confidence for score in scores):
            return None
    return labels[: stop + 1], judged


def accept_machine_labels(*, batch: Batch) -> dict[str, int]:
    """Machine labelings for every qualifying solution of the batch (see the module docstring);
    {"accepted", "audited", "considered"}. Idempotent: a solution with any labeling is skipped.
    LabelingError when the batch has machine labels off."""
    if not batch.machine_labels:
        raise LabelingError(
            f"Batch {batch.name} does not accept machine labels (a lead turns them on)."
        )
    labeled = Labeling.objects.filter(solution_id=OuterRef("pk"))
    open_solutions = Solution.objects.filter(
        batch=batch, is_quality_control=False, is_screening=False, active_count=0
    ).exclude(Exists(labeled))
    open_ids = list(open_solutions.values_list("pk", flat=True))
    found: dict[int, list[PreLabel]] = {}
    for row in PreLabel.objects.filter(solution__in=open_solutions).order_by(
        "solution_id", "-created_at", "-pk"
    ):
        found.setdefault(row.solution_id, []).append(row)
    accepted: dict[int, tuple[list[int | None], list[PreLabel]]] = {}
    for solution_id in open_ids:
        agreed = agreed_labels(found.get(solution_id, []), batch.machine_min_confidence)
        if agreed is not None:
            accepted[solution_id] = agreed
    audited = agreement.audit_sample(accepted, batch.machine_audit_share, batch.machine_audit_seed)
    if accepted:
        _write(batch, accepted, audited)
    return {"accepted": len(accepted), "audited": len(audited), "considered": len(open_ids)}


@transaction.atomic
def _write(
    batch: Batch,
    accepted: dict[int, tuple[list[int | None], list[PreLabel]]],
    audited: set[int],
) -> None:
    user, now = judges_user(), timezone.now()
    steps_of = dict(Solution.objects.filter(pk__in=accepted).values_list("pk", "steps"))
    # Lock the solutions and skip any a labeler claimed or labeled since they were read.
    locked = (
        Solution.objects.select_for_update()
        .filter(pk__in=accepted, active_count=0)
        .exclude(Exists(Labeling.objects.filter(solution_id=OuterRef("pk"))))
        .values_list("pk", flat=True)
    )
    still_open = set(locked)
    labelings = []
    for solution_id, (labels, judged) in accepted.items():
        if solution_id not in still_open:
            continue
        labelings.append(
            Labeling(
                solution_id=solution_id,
                labeler=user,
                status=Labeling.Status.COMPLETED,
                finish_reason=FinishReason.FOUND_ERROR if -1 in labels else FinishReason.SOLUTION,
                started_at=now,
                finished_at=now,
                source=Labeling.Source.MACHINE,
                machine_audit=solution_id in audited,
                machine_judges=[
                    {
                        "kind": p.kind,
                        "judge": p.judge,
                        "prelabel": p.pk,
                        "run": p.run_id,
                        "labels": p.labels,
                        "scores": p.scores,
                    }
                    for p in judged
                ],
            )
        )
    # Both databases return the new rows' ids from a bulk insert (PostgreSQL, SQLite >= 3.35).
    made = {row.solution_id: row for row in Labeling.objects.bulk_create(labelings)}
    step_rows, completions = [], []
    for solution_id, labeling in made.items():
        labels = accepted[solution_id][0]
        for index, label in enumerate(labels):
            step_rows.append(
                StepLabel(
                    labeling=labeling,
                    index=index,
                    chosen_completion=None if label == -1 else 0,
                    created_at=now,
                )
            )
            completions.append((label, steps_of[solution_id][index]))
    StepLabel.objects.bulk_create(step_rows)
    Completion.objects.bulk_create(
        Completion(step=step, index=0, text=text, rating=label, source="machine")
        for step, (label, text) in zip(step_rows, completions, strict=True)
    )
    # The unaudited ones leave the human queue: labeled, as far as it is concerned.
    Solution.objects.filter(pk__in=[pk for pk in made if pk not in audited]).update(
        completed_count=batch.overlap
    )
