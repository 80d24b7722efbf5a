"""Quality control and agreement: a labeler's record per project, gold references and results,
the lead counters (per batch and labeler, per batch and hour), agreement per solution, batch and
labeler pair, adjudication."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .core import Batch, Labeling, Solution


class LabelerRecord(models.Model):
    """A labeler's record in one project: their state there (screening, active, paused,
    rejected), their screening, the gold check's window and counters, and their agreement with
    the other labelers. Work is judged where it is done: a pause in one project leaves the others
    alone. `user` is the labeler (as `Labeling.labeler` and `GoldResult.labeler` are), so the hot
    reads find the row by the ids they hold, with no join through `Labeler`."""

    class State(models.TextChoices):
        SCREENING = "screening", "screening"
        ACTIVE = "active", "active"
        PAUSED = "paused", "paused"
        REJECTED = "rejected", "rejected"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="labeler_records"
    )
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.CASCADE, related_name="labeler_records"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Quality control: which work `services.queue.claim` hands out (the queue's docstring);
    # `services.quality` moves a labeler from one state to another.
    state = models.CharField(max_length=16, choices=State.choices, default=State.SCREENING)
    state_reason = models.CharField(max_length=300, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    screening_score = models.FloatField(null=True, blank=True)
    screening_passed = models.BooleanField(null=True, blank=True)
    screening_done_at = models.DateTimeField(null=True, blank=True)
    # Rolling gold accuracy counts only results after this moment (reset on reinstatement).
    gold_window_start = models.DateTimeField(null=True, blank=True)
    claims_since_gold = models.PositiveIntegerField(default=0)
    # Cumulative gold counters, kept current as gold labelings finish.
    gold_labelings = models.PositiveIntegerField(default=0)
    gold_steps = models.PositiveIntegerField(default=0)
    gold_steps_exact = models.PositiveIntegerField(default=0)
    gold_steps_binary = models.PositiveIntegerField(default=0)
    gold_first_error_total = models.PositiveIntegerField(default=0)
    gold_first_error_match = models.PositiveIntegerField(default=0)
    # Agreement with other labelers on shared solutions, kept current as solutions reach N.
    agree_steps_compared = models.PositiveIntegerField(default=0)
    agree_steps_same = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="one_record_per_project"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in project {self.project_id}: {self.state}"

    @property
    def may_do_regular_work(self) -> bool:
        return self.state == self.State.ACTIVE

    @property
    def paused_by_gold(self) -> bool:
        """Paused by the gold check (quality.pause_if_inaccurate, which names no one), not by a
        lead's hand."""
        return self.state == self.State.PAUSED and self.state_changed_by_id is None

    @property
    def gold_accuracy(self) -> float | None:
        return self.gold_steps_exact / self.gold_steps if self.gold_steps else None

    @property
    def gold_binary_accuracy(self) -> float | None:
        return self.gold_steps_binary / self.gold_steps if self.gold_steps else None

    @property
    def gold_first_error_accuracy(self) -> float | None:
        if not self.gold_first_error_total:
            return None
        return self.gold_first_error_match / self.gold_first_error_total

    @property
    def agreement(self) -> float | None:
        if not self.agree_steps_compared:
            return None
        return self.agree_steps_same / self.agree_steps_compared


class GoldLabel(models.Model):
    """Reference step ratings of a gold solution (Solution.is_quality_control), up to its first -1."""

    solution = models.OneToOneField(Solution, on_delete=models.CASCADE, related_name="gold")
    ratings = models.JSONField(help_text="Reference rating per step, stopping at the first -1.")
    first_error = models.SmallIntegerField(null=True, blank=True)
    source = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"gold for solution {self.solution_id}"


class GoldResult(models.Model):
    """How one finished labeling of a gold solution compared with its reference."""

    labeling = models.OneToOneField(Labeling, on_delete=models.CASCADE, related_name="gold_result")
    labeler = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gold_results"
    )
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="+")
    is_screening = models.BooleanField(default=False)
    steps_compared = models.PositiveSmallIntegerField(default=0)
    steps_exact = models.PositiveSmallIntegerField(default=0)
    steps_binary = models.PositiveSmallIntegerField(default=0)  # -1 vs not -1
    first_error_match = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["labeler", "-created_at"], name="goldresult_labeler_idx")]


class Tally(models.Model):
    """Counters of finished labelings, added in the transaction that finishes each one."""

    labelings = models.PositiveIntegerField(default=0)
    surplus = models.PositiveIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)
    time_ms = models.BigIntegerField(default=0)
    pos = models.PositiveIntegerField(default=0)
    neu = models.PositiveIntegerField(default=0)
    neg = models.PositiveIntegerField(default=0)
    flagged = models.PositiveIntegerField(default=0)
    fin_solution = models.PositiveIntegerField(default=0)
    fin_found_error = models.PositiveIntegerField(default=0)
    fin_give_up = models.PositiveIntegerField(default=0)
    fin_bad_problem = models.PositiveIntegerField(default=0)
    solutions_done = models.IntegerField(default=0)  # solutions that reached their N

    TALLY_FIELDS = (
        "labelings",
        "surplus",
        "steps",
        "time_ms",
        "pos",
        "neu",
        "neg",
        "flagged",
        "fin_solution",
        "fin_found_error",
        "fin_give_up",
        "fin_bad_problem",
        "solutions_done",
    )

    class Meta:
        abstract = True


class BatchLabelerStats(Tally):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="labeler_stats")
    labeler = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    last_finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batch labeler stats"
        constraints = [
            models.UniqueConstraint(
                fields=["batch", "labeler"], name="one_stats_row_per_batch_labeler"
            )
        ]


class BatchHourStats(Tally):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="hour_stats")
    hour = models.DateTimeField()

    class Meta:
        verbose_name_plural = "batch hour stats"
        constraints = [
            models.UniqueConstraint(fields=["batch", "hour"], name="one_stats_row_per_batch_hour")
        ]


class SolutionAgreement(models.Model):
    """Agreement among a solution's N labelings, computed when it reaches N (N >= 2)."""

    solution = models.OneToOneField(Solution, on_delete=models.CASCADE, related_name="agreement")
    batch = models.ForeignKey(Batch, null=True, on_delete=models.CASCADE, related_name="+")
    labelings = models.PositiveSmallIntegerField(default=0)
    steps_compared = models.PositiveSmallIntegerField(default=0)
    alpha = models.FloatField(null=True, blank=True)  # Krippendorff, ordinal
    raw = models.FloatField(null=True, blank=True)  # share of agreeing pairs over steps
    first_error_agree = models.BooleanField(default=True)
    needs_adjudication = models.BooleanField(default=False)
    # What this solution added to the pair and batch counters, so a recompute can take it back.
    contribution = models.JSONField(default=dict)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(
                fields=["batch", "computed_at"],
                condition=Q(needs_adjudication=True),
                name="agreement_adjudication_idx",
            )
        ]


class BatchAgreement(models.Model):
    """A batch's Krippendorff coincidence matrix and pair counts: alpha without a scan."""

    batch = models.OneToOneField(Batch, on_delete=models.CASCADE, related_name="agreement")
    coincidence = models.JSONField(default=dict)  # {"-1,0": count, ...}
    solutions = models.PositiveIntegerField(default=0)
    flagged = models.PositiveIntegerField(default=0)
    pairs = models.PositiveIntegerField(default=0)
    pairs_same = models.PositiveIntegerField(default=0)
    first_error_pairs = models.PositiveIntegerField(default=0)
    first_error_same = models.PositiveIntegerField(default=0)


class PairAgreement(models.Model):
    """Two labelers on the solutions they both labeled (labeler_a has the smaller id)."""

    labeler_a = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    labeler_b = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    solutions = models.PositiveIntegerField(default=0)
    steps_compared = models.PositiveIntegerField(default=0)
    steps_same = models.PositiveIntegerField(default=0)
    first_error_same = models.PositiveIntegerField(default=0)
    coincidence = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["labeler_a", "labeler_b"], name="one_row_per_labeler_pair"
            )
        ]


class Adjudication(models.Model):
    """A lead's final step ratings for a solution; exports use these before any labeling's."""

    solution = models.OneToOneField(Solution, on_delete=models.CASCADE, related_name="adjudication")
    ratings = models.JSONField(help_text="Final rating per step, stopping at the first -1.")
    lead = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
