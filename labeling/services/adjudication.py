"""Agreement between labelers of a solution, and the lead's adjudication of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import (
    Exists,
    F,
    FilteredRelation,
    JSONField,
    Q,
    QuerySet,
    Subquery,
)
from django.utils import timezone

from labeling import agreement as agreement_math
from labeling import selectors
from labeling.models import (
    Adjudication,
    BatchAgreement,
    LabelerRecord,
    Labeling,
    PairAgreement,
    RatingEvent,
    Solution,
    SolutionAgreement,
)
from labeling.services.errors import LabelingError
from labeling.services.quality import VERDICT_REASONS
from stepwise.compiled import CompiledQuery


def _labelings_for_agreement(solution: Solution) -> list[Labeling]:
    return list(
        Labeling.objects.filter(
            solution=solution,
            status=Labeling.Status.COMPLETED,
            is_surplus=False,
            source=Labeling.Source.HUMAN,  # the judges' machine labelings are no labeler's
        )
        # Whether a lead has decided the solution already, in the same query.
        .annotate(adjudicated=Exists(Adjudication.objects.filter(solution=solution)))
        .order_by("id")
    )


def _agreement_read(solution_id: int) -> QuerySet[Labeling, tuple[Any, ...]]:
    """In one query: the solution's kept finished labelings, one row per rated step (its
    completion 0's rating, in step order; a labeling with none rated has one row of Nones),
    each row also saying whether a lead has decided the solution and what an earlier
    computation of its agreement added (None the first time)."""
    earlier = SolutionAgreement.objects.filter(solution_id=solution_id)
    return (
        Labeling.objects.filter(
            solution_id=solution_id,
            status=Labeling.Status.COMPLETED,
            is_surplus=False,
            source=Labeling.Source.HUMAN,
        )
        .annotate(
            rated=FilteredRelation(
                "step_labels__completions", condition=Q(step_labels__completions__index=0)
            ),
            adjudicated=Exists(Adjudication.objects.filter(solution_id=solution_id)),
            earlier=Subquery(earlier.values("contribution")[:1], output_field=JSONField()),
            earlier_id=Subquery(earlier.values("pk")[:1]),
        )
        .order_by("id", "step_labels__index")
        .values_list(
            "id",
            "labeler_id",
            "finish_reason",
            "rated__id",
            "rated__rating",
            "adjudicated",
            "earlier",
            "earlier_id",
        )
    )


# Compiled once per connection (stepwise/compiled.py), as the rating's reads: building and
# compiling these cost more than running them, on every finish that brings a solution to N.
AGREEMENT_READ = CompiledQuery(_agreement_read, "solution_id")
BATCH_AGREEMENT_LOCKED = CompiledQuery(
    lambda batch_id: BatchAgreement.objects.select_for_update().filter(batch_id=batch_id),
    "batch_id",
)
PAIR_AGREEMENT_LOCKED = CompiledQuery(
    lambda a, b: PairAgreement.objects.select_for_update().filter(labeler_a_id=a, labeler_b_id=b),
    "a",
    "b",
)


def agreement_record(*, solution: Solution) -> SolutionAgreement | None:
    """Compute a solution's agreement and fold it into the batch and pair counters.

    Called when a solution reaches N, by a caller that holds the solution's lock (a finish),
    so what was added before (a recompute takes it back first) cannot change meanwhile.
    """
    rows = AGREEMENT_READ.rows(solution_id=solution.pk)
    ratings: dict[int, list[int]] = {}
    verdicts: dict[int, bool] = {}
    owner: dict[int, int] = {}
    for labeling_id, labeler_id, finish_reason, completion_id, rating, *_ in rows:
        steps = ratings.setdefault(labeling_id, [])
        owner[labeling_id] = labeler_id
        verdicts[labeling_id] = finish_reason in VERDICT_REASONS
        if completion_id is not None:
            steps.append(cast(int, rating))  # rated steps have one
    if len(ratings) < 2:
        return None
    adjudicated, earlier, earlier_id = rows[0][5:]
    result = agreement_math.solution_agreement(ratings, verdicts)
    needs = not result.first_error_agree or (
        result.raw is not None and result.raw < settings.STEPWISE_ADJUDICATE_BELOW
    )
    contribution = {
        "coincidence": result.coincidence,
        "pairs": [
            {
                "a": min(owner[p.a], owner[p.b]),
                "b": max(owner[p.a], owner[p.b]),
                "compared": p.compared,
                "same": p.same,
                "fe_same": p.first_error_same,
                "coincidence": p.coincidence,
            }
            for p in result.pairs
        ],
        "needs": needs,
    }
    if earlier is not None:
        _fold_agreement(solution, earlier, sign=-1)
    _fold_agreement(solution, contribution, sign=1)
    values = {
        "batch_id": solution.batch_id,
        "labelings": len(ratings),
        "steps_compared": result.steps_compared,
        "alpha": result.alpha,
        "raw": result.raw,
        "first_error_agree": result.first_error_agree,
        "needs_adjudication": needs and not adjudicated,
        "contribution": contribution,
        "computed_at": timezone.now(),
    }
    if earlier_id is None:
        return SolutionAgreement.objects.create(solution=solution, **values)
    SolutionAgreement.objects.filter(pk=earlier_id).update(**values)
    return SolutionAgreement(pk=earlier_id, solution=solution, **values)


def agreement_withdraw(*, solution: Solution) -> None:
    """A labeling among the solution's N is reopened: the solution is below N again, so its
    agreement, computed over N, takes back what it added to the batch's, the pairs' and the
    labelers' counters and goes (with it, its place in the adjudication queue). The finish that
    brings the solution back to N computes it afresh. The caller holds the solution's lock."""
    earlier = (
        SolutionAgreement.objects.filter(solution_id=solution.pk)
        .values_list("pk", "contribution")
        .first()
    )
    if earlier is None:
        return
    earlier_id, contribution = earlier
    _fold_agreement(solution, contribution, sign=-1)
    SolutionAgreement.objects.filter(pk=earlier_id).delete()


def _fold_agreement(solution: Solution, contribution: dict, *, sign: int) -> None:
    """Add (or take back) a solution's agreement in its batch's, its pairs' and its labelers'
    counters (their records in the solution's project)."""
    if not contribution:
        return
    batch_id, project_id = solution.batch_id, cast(int, solution.project_id)
    pairs = contribution.get("pairs", [])
    if batch_id is not None:
        # Locked as it is read (or created): one statement once the row exists.
        row = BATCH_AGREEMENT_LOCKED.first(batch_id=batch_id)
        if row is None:  # the batch's first: created (or, in a race, read) and locked
            row, _ = BatchAgreement.objects.select_for_update().get_or_create(batch_id=batch_id)
        row.coincidence = agreement_math.add_coincidence(
            row.coincidence, contribution["coincidence"], sign
        )
        row.solutions += sign
        row.flagged += sign * int(contribution.get("needs", False))
        row.pairs += sign * sum(p["compared"] for p in pairs)
        row.pairs_same += sign * sum(p["same"] for p in pairs)
        row.first_error_pairs += sign * sum(1 for p in pairs if p["fe_same"] is not None)
        row.first_error_same += sign * sum(1 for p in pairs if p["fe_same"])
        row.save()
    per_labeler: dict[int, list[int]] = {}
    for p in pairs:
        pair = PAIR_AGREEMENT_LOCKED.first(a=p["a"], b=p["b"])
        if pair is None:
            pair, _ = PairAgreement.objects.select_for_update().get_or_create(
                labeler_a_id=p["a"], labeler_b_id=p["b"]
            )
        pair.coincidence = agreement_math.add_coincidence(pair.coincidence, p["coincidence"], sign)
        pair.solutions += sign
        pair.steps_compared += sign * p["compared"]
        pair.steps_same += sign * p["same"]
        pair.first_error_same += sign * int(bool(p["fe_same"]))
        pair.save()
        for labeler_id in (p["a"], p["b"]):
            totals = per_labeler.setdefault(labeler_id, [0, 0])
            totals[0] += sign * p["compared"]
            totals[1] += sign * p["same"]
    # Labelers with the same sums in one statement: for N = 2, both in one.
    by_sums: dict[tuple[int, int], list[int]] = {}
    for labeler_id, (compared, same) in per_labeler.items():
        by_sums.setdefault((compared, same), []).append(labeler_id)
    for (compared, same), labeler_ids in by_sums.items():
        LabelerRecord.objects.filter(user_id__in=labeler_ids, project_id=project_id).update(
            agree_steps_compared=F("agree_steps_compared") + compared,
            agree_steps_same=F("agree_steps_same") + same,
        )


def _decided_ratings(ratings: Sequence[int | None], steps: int) -> list[int]:
    """The lead's final ratings as stored: one per step up to the first -1, or every step.

    A labeling ends at its first -1, so the steps after it have no rating; every step before
    it needs the lead's own decision (None is a step the lead left unset). Nothing is filled
    in: a missing decision is refused, naming the step.
    """
    if len(ratings) > steps or any(r not in (-1, 0, 1, None) for r in ratings):
        raise LabelingError("Final ratings are -1, 0 or +1 for each step.")
    given = list(ratings) + [None] * (steps - len(ratings))
    decided: list[int] = []
    for index, rating in enumerate(given):
        if rating is None:
            raise LabelingError(
                f"Step {index + 1} has no final rating: set it (1, 0 or -) before saving, "
                "or end the solution earlier with a -1."
            )
        decided.append(rating)
        if rating == -1:
            if any(r is not None for r in given[index + 1 :]):
                raise LabelingError("A -1 ends the solution: no step after it can be rated.")
            break
    return decided


def adjudication_save(
    *, solution: Solution, lead: User, ratings: Sequence[int | None], note: str = ""
) -> Adjudication:
    """Store a lead's final ratings and record, per labeling, every step the final changes.

    `ratings` has one entry per step from the first (None: the lead set none); see
    `_decided_ratings` for what must be set.
    """
    final = _decided_ratings(ratings, len(solution.steps))
    with transaction.atomic():
        Solution.objects.select_for_update().filter(pk=solution.pk).first()
        adjudication, _ = Adjudication.objects.update_or_create(
            solution=solution, defaults={"ratings": final, "lead": lead, "note": note}
        )
        now = timezone.now()
        events = []
        for labeling in _labelings_for_agreement(solution):
            own = [r for r, _ in selectors.labeling_ratings(labeling)]
            changed = False
            for index in range(max(len(own), len(final))):
                old = own[index] if index < len(own) else None
                new = final[index] if index < len(final) else None
                if old != new:
                    changed = True
                    events.append(
                        RatingEvent(
                            labeling=labeling,
                            step_index=index,
                            old_rating=old,
                            new_rating=new,
                            reason=RatingEvent.Reason.ADJUDICATION,
                            actor=lead,
                            created_at=now,
                            detail=note[:200],
                        )
                    )
            if not changed:
                events.append(
                    RatingEvent(
                        labeling=labeling,
                        reason=RatingEvent.Reason.ADJUDICATION,
                        actor=lead,
                        created_at=now,
                        detail="adjudicated: final agrees with this labeling",
                    )
                )
        RatingEvent.objects.bulk_create(events)
        SolutionAgreement.objects.filter(solution=solution).update(needs_adjudication=False)
    return adjudication
