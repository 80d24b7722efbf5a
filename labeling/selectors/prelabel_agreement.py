"""Machine pre-labels against the humans, per batch (issue 46), for the lead's batch page.

- `judge_agreement`: per judge kind, Cohen's kappa (scikit-learn's `cohen_kappa_score`) of the
  judge's latest label against each human rating of the same step, and the confusion matrix.
- `anchoring_check`: for a suggest batch, each of its labelers' gold accuracy and seconds per
  step while working on suggest batches, beside their own figures on batches without
  suggestions: a labeler who rubber-stamps suggestions gets faster and, on gold (never shown a
  suggestion), less accurate.

Krippendorff's alpha between labelers is the batch dashboard's own (`BatchAgreement`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from django.db.models import Count, Q, Sum

from labeling.models import Batch, Completion, GoldResult, Labeling, PreLabel, StepLabel

LABELS = [-1, 0, 1]  # the confusion matrix's rows (humans) and columns (the judge), in order
RECENT_LABELINGS = 2000  # the page reads the batch's latest finished labelings, bounded


@dataclass(frozen=True)
class JudgeAgreement:
    kind: str
    judges: list[str]  # the judges (PreLabel.judge) whose labels were compared
    steps: int  # human ratings compared with a judge label
    kappa: float | None  # None: fewer than two steps, or a single label on both sides
    confusion: list[list[int]]  # [human label][judge label], in LABELS order
    shown: int  # of `steps`, rated with that judge's suggestion on the page (suggest mode)

    @property
    def rows(self) -> list[tuple[int, list[int]]]:
        return list(zip(LABELS, self.confusion, strict=True))

    @property
    def raw(self) -> float | None:
        same = sum(self.confusion[i][i] for i in range(len(LABELS)))
        return same / self.steps if self.steps else None


def kappa_and_confusion(human: list[int], judge: list[int]) -> tuple[float | None, list[list[int]]]:
    """Cohen's kappa and the confusion matrix (rows: human, columns: judge, LABELS order)."""
    from sklearn.metrics import cohen_kappa_score, confusion_matrix  # heavy: the page only

    if not human:
        return None, [[0] * len(LABELS) for _ in LABELS]
    matrix = confusion_matrix(human, judge, labels=LABELS).tolist()
    if len(set(human) | set(judge)) < 2:
        return None, matrix  # one label everywhere: chance agreement is total, kappa undefined
    return float(cohen_kappa_score(human, judge, labels=LABELS)), matrix


def judge_agreement(batch: Batch) -> list[JudgeAgreement]:
    """Each judge kind with pre-labels on the batch's regular solutions, against the human
    ratings of its latest finished labelings (`RECENT_LABELINGS`). Three queries."""
    labeling_ids = list(
        Labeling.objects.filter(
            solution__batch=batch,
            solution__is_quality_control=False,
            status=Labeling.Status.COMPLETED,
            source=Labeling.Source.HUMAN,
        )
        .order_by("-finished_at")
        .values_list("id", flat=True)[:RECENT_LABELINGS]
    )
    ratings = list(
        Completion.objects.filter(step__labeling_id__in=labeling_ids, index=0)
        .exclude(rating__isnull=True)
        .values_list(
            "step__labeling__solution_id",
            "step__index",
            "rating",
            "step__suggestion_shown",
            "step__suggestion_judge",
        )
    )
    latest: dict[tuple[int, str], PreLabel] = {}
    prelabels = PreLabel.objects.filter(
        solution_id__in={solution_id for solution_id, *_ in ratings}
    ).order_by("created_at", "pk")
    for prelabel in prelabels.only("solution_id", "kind", "judge", "labels"):
        latest[(prelabel.solution_id, prelabel.kind)] = prelabel  # the newest wins
    found = []
    for kind in sorted({kind for _, kind in latest}):
        human: list[int] = []
        judge: list[int] = []
        shown = 0
        judges: set[str] = set()
        for solution_id, index, rating, was_shown, shown_judge in ratings:
            found_prelabel = latest.get((solution_id, kind))
            if found_prelabel is None or not isinstance(found_prelabel.labels, list):
                continue
            labels = found_prelabel.labels
            label = labels[index] if index < len(labels) else None
            if label not in LABELS or isinstance(label, bool) or rating is None:
                continue  # the judge gave no label for this step
            human.append(rating)
            judge.append(label)
            judges.add(found_prelabel.judge)
            shown += 1 if was_shown and shown_judge == found_prelabel.judge else 0
        kappa, confusion = kappa_and_confusion(human, judge)
        found.append(JudgeAgreement(kind, sorted(judges), len(human), kappa, confusion, shown))
    return found


@dataclass(frozen=True)
class AnchoringRow:
    user_id: int
    username: str
    gold_with: float | None  # gold accuracy (exact steps) while on suggest batches
    gold_with_steps: int
    gold_without: float | None  # ... and otherwise
    gold_without_steps: int
    seconds_with: float | None  # mean seconds per step on suggest batches
    seconds_without: float | None  # ... on batches without suggestions
    accepted_share: float | None  # of this batch's steps shown a suggestion, the share accepted


def anchoring_check(batch: Batch) -> list[AnchoringRow]:
    """The batch's labelers, each on suggest batches beside batches without suggestions.

    Gold never shows a suggestion; a gold labeling counts "with suggestions" when the labeler's
    regular labeling started just before it was in a suggest batch (the work it interrupted).
    Seconds per step are the steps' own times (`StepLabel.time_ms`). Four queries."""
    labeler_ids = list(
        Labeling.objects.filter(
            solution__batch=batch, status=Labeling.Status.COMPLETED, source=Labeling.Source.HUMAN
        )
        .values_list("labeler_id", flat=True)
        .distinct()
    )
    if not labeler_ids:
        return []
    regular = Labeling.objects.filter(
        labeler_id__in=labeler_ids, solution__is_quality_control=False
    ).exclude(status=Labeling.Status.SKIPPED)
    timeline: dict[int, tuple[list, list[bool]]] = {}
    names: dict[int, str] = {}
    rows = regular.order_by("labeler_id", "started_at").values_list(
        "labeler_id", "labeler__username", "started_at", "solution__batch__prelabel_mode"
    )
    for labeler_id, username, started_at, mode in rows:
        names[labeler_id] = username
        starts, modes = timeline.setdefault(labeler_id, ([], []))
        starts.append(started_at)
        modes.append(mode == Batch.PrelabelMode.SUGGEST)
    gold: dict[tuple[int, bool], list[int]] = {}
    results = GoldResult.objects.filter(labeler_id__in=labeler_ids).values_list(
        "labeler_id", "labeling__started_at", "steps_compared", "steps_exact"
    )
    for labeler_id, started_at, compared, exact in results:
        starts, modes = timeline.get(labeler_id, ([], []))
        at = bisect.bisect_left(starts, started_at) - 1
        during = at >= 0 and modes[at]
        totals = gold.setdefault((labeler_id, during), [0, 0])
        totals[0] += compared
        totals[1] += exact
    timed: dict[tuple[int, bool], list[int]] = {}  # [total ms, steps]
    per_step = (
        StepLabel.objects.filter(
            labeling__labeler_id__in=labeler_ids,
            labeling__solution__is_quality_control=False,
            time_ms__isnull=False,
        )
        .values("labeling__labeler_id", "labeling__solution__batch__prelabel_mode")
        .annotate(ms=Sum("time_ms"), n=Count("pk"))
    )
    for row in per_step:  # off and blind batches are both "without suggestions"
        key = (
            row["labeling__labeler_id"],
            row["labeling__solution__batch__prelabel_mode"] == Batch.PrelabelMode.SUGGEST,
        )
        totals = timed.setdefault(key, [0, 0])
        totals[0] += row["ms"] or 0
        totals[1] += row["n"]
    seconds = {key: ms / 1000 / n for key, (ms, n) in timed.items() if n}
    accepted = dict(
        (labeler_id, (shown, took))
        for labeler_id, shown, took in StepLabel.objects.filter(
            labeling__solution__batch=batch, suggestion_shown=True
        )
        .values("labeling__labeler_id")
        .annotate(n=Count("pk"), took=Count("pk", filter=Q(suggestion_accepted=True)))
        .values_list("labeling__labeler_id", "n", "took")
    )
    found = []
    for labeler_id in sorted(labeler_ids, key=lambda i: names.get(i, "")):
        with_gold = gold.get((labeler_id, True), [0, 0])
        without_gold = gold.get((labeler_id, False), [0, 0])
        shown, took = accepted.get(labeler_id, (0, 0))
        found.append(
            AnchoringRow(
                user_id=labeler_id,
                username=names.get(labeler_id, str(labeler_id)),
                gold_with=with_gold[1] / with_gold[0] if with_gold[0] else None,
                gold_with_steps=with_gold[0],
                gold_without=without_gold[1] / without_gold[0] if without_gold[0] else None,
                gold_without_steps=without_gold[0],
                seconds_with=seconds.get((labeler_id, True)),
                seconds_without=seconds.get((labeler_id, False)),
                accepted_share=took / shown if shown else None,
            )
        )
    return found
