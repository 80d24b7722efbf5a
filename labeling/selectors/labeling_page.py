"""The labeling page: a labeling's steps with its ratings so far, and the panel beside them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from labeling.models import Completion, Labeling
from labeling.selectors.prelabels import StepSuggestion, suggestion_of, with_suggestion


@dataclass(frozen=True)
class StepView:
    index: int
    text: str
    rating: int | None
    flagged: bool | None
    # Ratings that "rate again from here" at this step takes back (this one and later ones).
    taken_back: int = 0
    # A suggest batch's judge label for this step, shown while it is the one to rate.
    suggestion: StepSuggestion | None = None

    @property
    def number(self) -> int:
        """The step as the page counts it, from 1."""
        return self.index + 1


def step_views(labeling: Labeling) -> list[StepView]:
    """Each solution step with this labeling's rating so far (None where not rated yet)."""
    ratings = {
        c.step.index: c
        for c in Completion.objects.filter(step__labeling=labeling, index=0).select_related("step")
    }
    return [
        StepView(
            index=i,
            text=text,
            rating=ratings[i].rating if i in ratings else None,
            flagged=ratings[i].flagged if i in ratings else None,
            taken_back=sum(1 for j in ratings if j >= i) if i in ratings else 0,
        )
        for i, text in enumerate(labeling.solution.steps)
    ]


def labelings_for_page() -> QuerySet[Labeling]:
    """Labelings with what the labeling page shows beside them, in the query that loads them:
    the solution, its problem and batch, and `earlier_today`, the labeler's labelings started
    since midnight (server time) before this one, for the page's "solution k today"."""
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    earlier_today = (
        Labeling.objects.filter(
            labeler=OuterRef("labeler"), started_at__gte=midnight, pk__lt=OuterRef("pk")
        )
        .order_by()
        .values("labeler")
        .annotate(n=Count("pk"))
        .values("n")
    )
    page = Labeling.objects.select_related("solution__problem", "solution__batch").annotate(
        earlier_today=Coalesce(Subquery(earlier_today, output_field=IntegerField()), 0)
    )
    return with_suggestion(page)  # a suggest batch's judge labels, in the same statement


def with_step_suggestion(step: StepView, labeling: Labeling) -> StepView:
    """The step to rate with the suggestion the labeling's read brought for it, if any."""
    suggestion = suggestion_of(labeling)
    at = None if suggestion is None else suggestion.at(step.index)
    return step if at is None else replace(step, suggestion=at)


@dataclass(frozen=True)
class LabelingPanel:
    """What the labeling page's panel shows: the steps revealed so far and the progress."""

    steps: list[StepView]
    rated: list[StepView]
    current: StepView | None  # the step to rate now; None once the labeling is submitted
    number_today: int  # "solution k today", this one included

    @property
    def step_total(self) -> int:
        return len(self.steps)

    @property
    def rated_count(self) -> int:
        return len(self.rated)

    @property
    def step_number(self) -> int:
        """The step being rated (1-based); the last one rated once there is none to rate."""
        return self.current.index + 1 if self.current else len(self.rated)

    @property
    def hidden_count(self) -> int:
        return len(self.steps) - len(self.rated) - (1 if self.current else 0)


@dataclass(frozen=True)
class PanelProgress:
    """The panel's progress line after a rating, known without a query: steps 1..rated_count
    are rated and the next one is shown, or (`done`) the labeling ended at the last of them."""

    rated_count: int
    step_total: int
    done: bool = False

    @property
    def step_number(self) -> int:
        return self.rated_count if self.done else self.rated_count + 1


def labeling_panel(labeling: Labeling) -> LabelingPanel:
    """The panel of a labeling loaded through `labelings_for_page` (one query: the ratings)."""
    steps = step_views(labeling)
    rated = [s for s in steps if s.rating is not None]
    current = None
    still_open = labeling.status in (Labeling.Status.IN_PROGRESS, Labeling.Status.EXPIRED)
    if still_open and len(rated) < len(steps):
        current = with_step_suggestion(steps[len(rated)], labeling)
    earlier = getattr(labeling, "earlier_today", None)
    if earlier is None:  # loaded some other way: one more query
        earlier = cast(Any, labelings_for_page().get(pk=labeling.pk)).earlier_today
    return LabelingPanel(steps=steps, rated=rated, current=current, number_today=earlier + 1)


def labeling_ratings(labeling: Labeling) -> list[tuple[int, bool]]:
    """(rating, flagged) per rated step, in step order."""
    rows = (
        Completion.objects.filter(step__labeling=labeling, index=0)
        .order_by("step__index")
        .values_list("rating", "flagged")
    )
    return [(cast(int, r), bool(f)) for r, f in rows]  # a rated step's first completion has one
