"""Quality control and agreement: gold references and results, the lead counters (per batch and
labeler, per batch and hour), agreement per solution, batch and labeler pair, adjudication."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .core import Batch, Labeling, Solution


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
