"""Problems, solutions, batches and labelings: PRM800K modelled losslessly, both phases.

A PRM800K line is one Labeling: per step a StepLabel holding the rated Completions (the
alternatives the labeler saw), an optional human-written completion and the chosen index.
Queue and dashboard filters read real columns (status, counters, flags), never JSON.
"""

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .projects import default_project_id


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

    project = models.ForeignKey(
        "labeling.Project",
        on_delete=models.PROTECT,
        default=default_project_id,
        related_name="batches",
    )
    name = models.CharField(max_length=200)
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

    class PrelabelMode(models.TextChoices):
        OFF = "off", "off: no machine pre-labels"
        BLIND = "blind", "blind: judges run, labelers never see them"
        SUGGEST = "suggest", "suggest: the labeling page shows the judge's label for each step"

    prelabel_mode = models.CharField(
        max_length=8,
        choices=PrelabelMode.choices,
        default=PrelabelMode.OFF,
        db_default=PrelabelMode.OFF,  # the bulk paths insert rows in SQL of their own
    )
    prelabel_judge = models.CharField(
        max_length=8,
        blank=True,
        default="",
        db_default="",
        help_text="suggest mode: the judge kind (prm, llm, mc) whose latest pre-labels are shown.",
    )
    # Machine labels (issue 47): opt-in per batch by a lead. Solutions on which every judge
    # agrees (at least two, each step's score at least machine_min_confidence) become machine
    # labelings; machine_audit_share of them (seeded by machine_audit_seed) still go to humans.
    machine_labels = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Accept the judges' labels as machine labelings where they all agree.",
    )
    machine_min_confidence = models.FloatField(
        default=0.9,
        db_default=0.9,
        help_text="Every judge's score on every step at least this (0 to 1).",
    )
    machine_audit_share = models.FloatField(
        default=0.1, db_default=0.1, help_text="Share of machine labelings humans still label."
    )
    machine_audit_seed = models.IntegerField(
        default=0, db_default=0, help_text="Seeds which machine labelings are audited."
    )

    class Meta:
        verbose_name_plural = "batches"
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="batch_name_per_project"),
        ]

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

    # Its own column (not only through the batch): pool and gold solutions have no batch.
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
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
    content_sha256 = models.CharField(max_length=64)
    # Set only when a PRM800K line's ground truth differs from the matched Problem's, so
    # the exported line is still the imported one.
    question_override = models.JSONField(null=True, blank=True)
    # Queue counters, kept current under the solution's row lock (see labeling.queue).
    completed_count = models.PositiveIntegerField(default=0)
    active_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_sha256"], name="solution_content_per_project"
            ),
        ]
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
    """A user's labeler identity: the public id exports carry instead of the username. What they
    did in a project (screening, pause, gold accuracy, agreement) is its own row per project:
    `LabelerRecord`."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="labeler"
    )
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return str(self.public_id)


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
    # sha256 of the imported line: re-importing a file into a project adds nothing twice there
    # (one line per project; the same release may be imported into two projects).
    source_sha256 = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    # The labeling as one PRM800K release line, kept so exports stream one column instead of
    # re-assembling steps and completions: the imported line itself (verified against our
    # columns at import), or rendered from the columns when the labeling is submitted. Null
    # while in progress and after an edit; the exporter renders those from the columns.
    release_line = models.TextField(null=True, blank=True)
    # The newest lead's reply on the solution its labeler has had on screen (the labeling page
    # shows every reply): later ones are unread, and their home lists them.
    replies_seen_at = models.DateTimeField(null=True, blank=True)

    class Source(models.TextChoices):
        HUMAN = "human", "a person"
        MACHINE = "machine", "the judges (machine labels)"

    # Machine labelings (issue 47) are the judges', never a person's: their labeler is the
    # inactive judges account (labeling.services.machine_labels), `machine_judges` says which
    # pre-labels they came from, and every export and human-label count leaves them out.
    source = models.CharField(
        max_length=8,
        choices=Source.choices,
        default=Source.HUMAN,
        db_default=Source.HUMAN,  # the import and snapshot paths insert rows in SQL of their own
    )
    machine_judges = models.JSONField(
        null=True,
        blank=True,
        help_text="Machine labelings: per judge its kind, name, PreLabel id, run and scores.",
    )
    machine_audit = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A machine labeling whose solution still goes to humans (the audit).",
    )

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
            # The queue hands a labeler one solution at a time (`queue.claim` returns their open
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
    """What happened at one step of a labeling (a PRM800K `label.steps[i]`), and, where a
    judge's suggestion was shown for it, which (provenance: written with the rating itself)."""

    labeling = models.ForeignKey(Labeling, on_delete=models.CASCADE, related_name="step_labels")
    index = models.PositiveSmallIntegerField()
    chosen_completion = models.SmallIntegerField(null=True, blank=True)
    # PRM800K writes `"completions": null` for a step the labeler never got to rate.
    has_completions = models.BooleanField(default=True)
    time_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # db_default: the import and snapshot paths insert step labels in SQL of their own.
    suggestion_shown = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A judge's label for this step was on the page when it was rated.",
    )
    suggestion_judge = models.CharField(
        max_length=200, blank=True, default="", db_default="", help_text="PreLabel.judge."
    )
    suggestion_label = models.SmallIntegerField(
        choices=Rating.choices, null=True, blank=True, help_text="The judge's label shown."
    )
    suggestion_score = models.FloatField(
        null=True, blank=True, help_text="The judge's confidence in that label (0 to 1)."
    )
    suggestion_accepted = models.BooleanField(
        null=True, blank=True, help_text="Rated with the accept key (the rating is the label)."
    )

    class Meta:
        ordering = ["labeling", "index"]
        constraints = [
            models.UniqueConstraint(fields=["labeling", "index"], name="one_step_label_per_index"),
        ]


class PreLabel(models.Model):
    """A judge's labels for one solution's steps (machine pre-labels: issue 46).

    `labels[i]` is -1, 0, +1, or None: no label (after the first -1, as PRM800K stops there,
    or where the judge could not say); `scores[i]` the judge's confidence in labels[i] (0 to 1,
    None with no label). One row per solution and judge run; `run_id` is the modeling app's
    PreLabelRun (a plain id: labeling never imports modeling).
    """

    class Kind(models.TextChoices):
        PRM = "prm", "a PRM model version"
        LLM = "llm", "an LLM critic"
        MC = "mc", "Monte-Carlo rollouts (Math-Shepherd)"

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="prelabels")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    judge = models.CharField(max_length=200, help_text='What judged, e.g. "prm: v3 (run 12)".')
    run_id = models.PositiveIntegerField(db_index=True)
    labels = models.JSONField(help_text="Per step: -1, 0, +1 or null (no label).")
    scores = models.JSONField(help_text="Per step: the judge's confidence in its label, or null.")
    soft_scores = models.JSONField(
        null=True,
        blank=True,
        help_text="mc: per step the share of rollouts reaching a right answer.",
    )
    first_error = models.SmallIntegerField(
        null=True, blank=True, help_text="Index of the first -1; null when none."
    )
    raw = models.TextField(blank=True, help_text="llm: the critic's answer as it came.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["solution", "run_id"], name="one_prelabel_per_run"),
        ]
        indexes = [models.Index(fields=["solution", "kind", "-created_at"])]


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
    by every labeler who reaches the same prefix.

    Not queued work (`stepwise.queued.QueuedWork`): it is asked for again and again, keeping its
    candidates; `sent_at` says a task is out (cleared when it is through, empty while it waits
    under its labeler's cap), and a lost task is sent again when someone reaches the prefix,
    with no heartbeat, takeover or sweeper."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"  # its candidates appear in `steps` one by one
        READY = "ready", "ready"
        FAILED = "failed", "failed"
        # Stopped or cancelled: nobody waited for this prefix any more, or its labeler's newer
        # requests took its place (the cap). Sent again, keeping its candidates, when someone
        # reaches it.
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
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The labeler who asked for it last: it counts against their cap "
        "(STEPWISE_CANDIDATE_SETS_PER_LABELER).",
    )
    sent_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its task was sent; cleared when the task is through. Empty on a pending "
        "request: it waits for one of its labeler's tasks to end.",
    )

    # What the page says of each reason in `dropped` (one sample, several).
    DROPPED_WORDING = {
        "duplicate": ("was a duplicate of another", "were duplicates of others"),
        "empty": ("was empty", "were empty"),
        "cut": ("was cut off at the token cap", "were cut off at the token cap"),
        "abandoned": ("was stopped: nobody waited", "were stopped: nobody waited"),
    }

    class Meta:
        verbose_name_plural = "proposed steps"  # one row is a set of candidate steps
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
