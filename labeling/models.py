"""Problems, solutions, batches and labelings: PRM800K modelled losslessly, both phases.

A PRM800K line is one Labeling: per step a StepLabel holding the rated Completions (the
alternatives the labeler saw), an optional human-written completion and the chosen index.
Queue and dashboard filters read real columns (status, counters, flags), never JSON.
"""

import uuid
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from knox.models import AbstractAuthToken


class Rating(models.IntegerChoices):
    POSITIVE = 1, "+1 correct, moves forward"
    NEUTRAL = 0, "0 correct but unhelpful or ambiguous"
    NEGATIVE = -1, "-1 wrong, unverifiable or a dead end"


class FinishReason(models.TextChoices):
    SOLUTION = "solution", "reached the end"
    FOUND_ERROR = "found_error", "found an error"
    GIVE_UP = "give_up", "gave up"
    BAD_PROBLEM = "bad_problem", "bad problem"


class Problem(models.Model):
    text = models.TextField()
    # Imports match problems by text; a hash keeps that lookup indexable.
    text_sha256 = models.CharField(max_length=64, unique=True)
    ground_truth_answer = models.TextField(null=True, blank=True)
    ground_truth_solution = models.TextField(null=True, blank=True)
    subject = models.CharField(max_length=64, blank=True, db_index=True)
    level = models.PositiveSmallIntegerField(null=True, blank=True)
    unique_id = models.CharField(max_length=255, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.unique_id or f"problem {self.pk}"


class Batch(models.Model):
    """A labeling round. `generation` is PRM800K's generation number (null for phase-1 style)."""

    class Origin(models.TextChoices):
        IMPORT = "import", "imported labels"
        SAMPLES = "samples", "generator samples"
        ACTIVE_LEARNING = "active_learning", "selected by the PRM"
        MANUAL = "manual", "created by a lead"

    name = models.CharField(max_length=200, unique=True)
    generation = models.IntegerField(null=True, blank=True, db_index=True)
    overlap = models.PositiveSmallIntegerField(
        default=1, help_text="Labelings wanted per solution."
    )
    priority = models.IntegerField(default=0, help_text="Higher is served first.")
    is_active = models.BooleanField(default=True)
    origin = models.CharField(max_length=32, choices=Origin.choices, default=Origin.MANUAL)
    labelers = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="assigned_batches",
        help_text="Empty means everyone with the labeler role.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Quality control and leases per batch; null means the STEPWISE_* setting.
    gold_rate = models.FloatField(
        null=True, blank=True, help_text="Share of claims served a gold solution (0 to 1)."
    )
    lease_seconds_min = models.PositiveIntegerField(null=True, blank=True)
    lease_seconds_max = models.PositiveIntegerField(null=True, blank=True)

    class Protocol(models.TextChoices):
        STEPS = "steps", "rate the steps (PRM800K phase 2)"
        ALTERNATIVES = "alternatives", "rate candidate next steps, choose or write one (phase 1)"

    protocol = models.CharField(max_length=16, choices=Protocol.choices, default=Protocol.STEPS)
    alternatives_k = models.PositiveSmallIntegerField(
        default=5, help_text="Candidate next steps shown per step (alternatives protocol)."
    )
    alternatives_after_error = models.BooleanField(
        default=False,
        help_text="Rate the steps: after a −1, the labeler also rates the model's alternatives "
        "to the wrong step, as in PRM800K phase 2.",
    )

    class Meta:
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """The lease bounds as a pair (the lead's form and the admin run this before saving)."""
        low, high = self.lease_seconds_min, self.lease_seconds_max
        if low is not None and high is not None and low > high:
            raise ValidationError(
                {
                    "lease_seconds_max": f"The lease ceiling ({high:,} s) is below its floor "
                    f"({low:,} s): the maximum must be at least the minimum."
                }
            )


class Solution(models.Model):
    class Format(models.TextChoices):
        # How the question renders in a PRM800K line: phase 1 has no pre-generated fields.
        PHASE1 = "phase1", "PRM800K phase 1 (labeler-chosen path)"
        PHASE2 = "phase2", "pre-generated solution"

    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="solutions")
    batch = models.ForeignKey(
        Batch, null=True, blank=True, on_delete=models.SET_NULL, related_name="solutions"
    )
    steps = models.JSONField(help_text="Ordered step texts.")
    final_answer = models.TextField(null=True, blank=True)  # PRM800K pre_generated_answer
    verifier_score = models.FloatField(null=True, blank=True)  # pre_generated_verifier_score
    generator = models.CharField(max_length=200, blank=True)
    source_id = models.CharField(max_length=255, blank=True, db_index=True)
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.PHASE2)
    generation = models.IntegerField(null=True, blank=True, db_index=True)
    is_quality_control = models.BooleanField(default=False)
    is_screening = models.BooleanField(default=False)
    answer_correct = models.BooleanField(null=True, blank=True)
    # Identity for re-imports: problem, steps, answer, score, flags, generation, format.
    content_sha256 = models.CharField(max_length=64, unique=True)
    # Set only when a PRM800K line's ground truth differs from the matched Problem's, so
    # the exported line is still the imported one.
    question_override = models.JSONField(null=True, blank=True)
    # Queue counters, kept current under the solution's row lock (see labeling.queue).
    completed_count = models.PositiveIntegerField(default=0)
    active_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["batch", "completed_count", "id"], name="solution_queue_idx"),
            # The gold pool is small: claims look it up without scanning regular solutions.
            models.Index(
                fields=["is_screening", "completed_count", "id"],
                condition=Q(is_quality_control=True),
                name="solution_gold_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"solution {self.pk} of {self.problem_id}"

    @property
    def step_count(self) -> int:
        return len(self.steps)


class Labeler(models.Model):
    """A user's labeler identity: the public id exports carry instead of the username."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="labeler"
    )
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class State(models.TextChoices):
        SCREENING = "screening", "screening"
        ACTIVE = "active", "active"
        PAUSED = "paused", "paused"
        REJECTED = "rejected", "rejected"

    # Quality control: what work claim_next may hand out (see labeling.quality).
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

    def __str__(self) -> str:
        return str(self.public_id)

    @property
    def may_do_regular_work(self) -> bool:
        return self.state == self.State.ACTIVE

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


class Labeling(models.Model):
    """One labeler's pass over one solution; a claim while in progress (a lease that expires)."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", "in progress"
        COMPLETED = "completed", "completed"
        EXPIRED = "expired", "lease expired"
        # The labeler passed it on (skip_reason says why): not counted, not offered to them again.
        SKIPPED = "skipped", "skipped"

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="labelings")
    labeler = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="labelings"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    finish_reason = models.CharField(
        max_length=16, choices=FinishReason.choices, null=True, blank=True
    )
    # Set when the labeling is submitted: its steps' times, plus time on a step left unrated
    # (give up, bad problem). A rating does not write it (rating.rate_step).
    total_time_ms = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Submitted after its lease expired and the solution already had its N: kept, marked.
    is_surplus = models.BooleanField(default=False)
    skip_reason = models.CharField(max_length=300, blank=True)
    # sha256 of the imported line: re-importing a file adds nothing twice.
    source_sha256 = models.CharField(max_length=64, null=True, blank=True, unique=True)
    # The labeling as one PRM800K release line, kept so exports stream one column instead of
    # re-assembling steps and completions: the imported line itself (verified against our
    # columns at import), or rendered from the columns when the labeling is submitted. Null
    # while in progress and after an edit; the exporter renders those from the columns.
    release_line = models.TextField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["labeler", "status"], name="labeling_labeler_status_idx"),
            models.Index(fields=["solution", "status"], name="labeling_solution_status_idx"),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="in_progress"),
                name="labeling_open_lease_idx",
            ),
        ]
        constraints = [
            # The queue hands a labeler one solution at a time (claim_next returns their open
            # labeling first): concurrent claims from several tabs get that one back.
            models.UniqueConstraint(
                fields=["labeler"],
                condition=Q(status="in_progress"),
                name="one_open_labeling_per_labeler",
            ),
        ]

    def __str__(self) -> str:
        return f"labeling {self.pk} of solution {self.solution_id} by {self.labeler_id}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.IN_PROGRESS


class StepLabel(models.Model):
    """What happened at one step of a labeling (a PRM800K `label.steps[i]`)."""

    labeling = models.ForeignKey(Labeling, on_delete=models.CASCADE, related_name="step_labels")
    index = models.PositiveSmallIntegerField()
    chosen_completion = models.SmallIntegerField(null=True, blank=True)
    # PRM800K writes `"completions": null` for a step the labeler never got to rate.
    has_completions = models.BooleanField(default=True)
    time_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["labeling", "index"]
        constraints = [
            models.UniqueConstraint(fields=["labeling", "index"], name="one_step_label_per_index"),
        ]


class Completion(models.Model):
    """A rated candidate for a step; `is_human` marks the labeler-written completion."""

    step = models.ForeignKey(StepLabel, on_delete=models.CASCADE, related_name="completions")
    index = models.SmallIntegerField(help_text="Position among the alternatives; -1 for human.")
    text = models.TextField()
    rating = models.SmallIntegerField(choices=Rating.choices, null=True, blank=True)
    flagged = models.BooleanField(null=True, blank=True)
    is_human = models.BooleanField(default=False)
    source = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["step", "index"]
        constraints = [
            models.UniqueConstraint(fields=["step", "index"], name="one_completion_per_index"),
        ]


class ProposedSteps(models.Model):
    """The generator's candidate next steps for one prefix of one problem (alternatives
    protocol). Requested ahead of the labeler, filled by a task on the `generate` queue, shared
    by every labeler who reaches the same prefix."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"  # its candidates appear in `steps` one by one
        READY = "ready", "ready"
        FAILED = "failed", "failed"
        # Stopped while running: nobody waited for this prefix any more. Sent again, keeping
        # its candidates, when someone reaches it.
        STOPPED = "stopped", "stopped"

    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="proposals")
    prefix = models.JSONField(help_text="The path's step texts so far.")
    prefix_sha256 = models.CharField(max_length=64)
    k = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    steps = models.JSONField(
        default=list,
        blank=True,
        help_text="Up to k distinct candidates, in the order they were found; only appended to "
        "(ratings refer to them by position).",
    )
    dropped = models.JSONField(
        default=dict,
        blank=True,
        help_text="Samples that gave no candidate, by reason: why there are fewer than k.",
    )
    generator = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)

    # What the page says of each reason in `dropped` (one sample, several).
    DROPPED_WORDING = {
        "duplicate": ("was a duplicate of another", "were duplicates of others"),
        "empty": ("was empty", "were empty"),
        "cut": ("was cut off at the token cap", "were cut off at the token cap"),
        "abandoned": ("was stopped: nobody waited", "were stopped: nobody waited"),
    }

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["problem", "prefix_sha256", "k"], name="one_proposal_per_prefix"
            ),
        ]

    @property
    def writing(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING)

    @property
    def shortfall(self) -> str:
        """Why fewer than k candidates came, e.g. "3 of 5: 2 were duplicates of others"; empty
        while they are still being written or when all k came."""
        if self.writing or len(self.steps) >= self.k:
            return ""
        reasons = [
            f"{count} {self.DROPPED_WORDING.get(reason, (reason, reason))[count > 1]}"
            for reason, count in self.dropped.items()
            if count
        ]
        return f"{len(self.steps)} of {self.k}" + (f": {', '.join(reasons)}" if reasons else "")


class RatingEvent(models.Model):
    """Audit trail: every change of a rating, who made it and why."""

    class Reason(models.TextChoices):
        RATE = "rate", "rated"
        UNDO = "undo", "undone"
        EDIT = "edit", "edited by the labeler"
        ADJUDICATION = "adjudication", "adjudicated by a lead"
        FINISH = "finish", "finished"

    labeling = models.ForeignKey(Labeling, on_delete=models.CASCADE, related_name="events")
    step_index = models.SmallIntegerField(null=True, blank=True)
    old_rating = models.SmallIntegerField(null=True, blank=True)
    new_rating = models.SmallIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=16, choices=Reason.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]


class Note(models.Model):
    """A short note on a solution: a labeler's on one of their own ratings (why −1, why
    flagged), or a lead's reply on the item. Notes are user text: pages escape them, exports
    carry them in the stepwise formats (never in the PRM800K line, which has no such field)."""

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="notes")
    # The labeling whose rating the note explains; null for a lead's reply on the item.
    labeling = models.ForeignKey(
        Labeling, null=True, blank=True, on_delete=models.CASCADE, related_name="notes"
    )
    step_index = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The step it is about; empty for the whole solution."
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["solution", "created_at"], name="note_solution_idx")]

    def __str__(self) -> str:
        return f"note {self.pk} on solution {self.solution_id}"


# --- quality control ----------------------------------------------------------------------


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
        constraints = [
            models.UniqueConstraint(
                fields=["batch", "labeler"], name="one_stats_row_per_batch_labeler"
            )
        ]


class BatchHourStats(Tally):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="hour_stats")
    hour = models.DateTimeField()

    class Meta:
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


class Guidelines(models.Model):
    """Labeling guidelines, versioned: every edit adds a row; the highest version is shown."""

    version = models.PositiveIntegerField(unique=True)
    text = models.TextField(help_text="Plain text: '# ' headings, '- ' bullets, $LaTeX$.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "guidelines"
        ordering = ["-version"]


# --- snapshots


class Snapshot(models.Model):
    """An export written once to a file and never changed: its sha256 says so.

    Created pending by `labeling.services.snapshots.snapshot_create`, written by a Celery task through
    `snapshot_run`. There is no update path: the only writes are the claim, progress while
    running, and the final done/failed transition, all conditional on the current status.
    """

    class Format(models.TextChoices):
        PRM800K = "prm800k", "PRM800K JSONL (release format)"
        STEPWISE_JSONL = "stepwise_jsonl", "stepwise supervision, JSONL"
        STEPWISE_PARQUET = "stepwise_parquet", "stepwise supervision, Parquet"

    class Status(models.TextChoices):
        PENDING = "pending", "waiting for a worker"
        RUNNING = "running", "writing"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    format = models.CharField(max_length=24, choices=Format.choices, default=Format.PRM800K)
    filters = models.JSONField(default=dict, blank=True)
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    total = models.PositiveIntegerField(null=True, blank=True, help_text="Labelings to export.")
    processed = models.PositiveIntegerField(default=0)
    row_count = models.PositiveIntegerField(null=True, blank=True)
    step_label_count = models.PositiveIntegerField(null=True, blank=True)
    size_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    file_path = models.CharField(max_length=500, blank=True, help_text="Relative to MEDIA_ROOT.")
    error = models.TextField(blank=True)
    # Database time when the export started reading: "changes since" this snapshot means
    # labelings whose updated_at is later.
    cutoff_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="snapshots"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When its task was last sent to the broker: a pending row not taken long after is resent.
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"snapshot {self.pk} ({self.format}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def progress_percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.total:
            return 0
        return min(99, int(100 * self.processed / self.total))


class ApiToken(AbstractAuthToken):
    """A user's API token (django-rest-knox's model, swapped in by KNOX_TOKEN_MODEL): only the
    key's first characters (token_key, for the lookup) and its SHA-512 digest are stored, never
    the key. Named by its owner; last_used is written at most once a minute
    (labeling.authentication)."""

    # Annotated by hand: knox has no type information, so the base class is Any to mypy.
    name: "models.CharField[str, str]" = models.CharField(max_length=100)
    last_used: "models.DateTimeField[datetime | None, datetime | None]" = models.DateTimeField(
        null=True, blank=True
    )

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @property
    def is_expired(self) -> bool:
        return self.expiry is not None and self.expiry <= timezone.now()
