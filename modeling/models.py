"""Training runs, the model versions they produce, and the scores those models give solutions.

Invariant: the active model changes only when a run finished and passed its evaluation
(`ModelVersion.activate`). A run is claimed by a conditional update on its status, so a
redelivered task is a no-op and two workers never train the same run.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from labeling.models import default_project_id
from labeling.models.projects import DEFAULT_SLUG
from modeling.training.selection import MIX_RULES
from stepwise.queued import QueuedStatus, QueuedWork

# The life of a training, generation or sampling run: queued work's own states.
RunStatus = QueuedStatus


class TrainingRun(QueuedWork):
    Status = RunStatus
    # What its worker writes lands whatever a sweeper or a cancel wrote meanwhile: a run failed
    # as stale whose worker then finishes has its model version, so it is SUCCEEDED.
    WORKER_HAS_LAST_WORD = True
    DATA_FILE = "data.jsonl"  # its labelings frozen as PRM800K lines, in `folder`
    # The phases a worker reports, in order: what the page calls each, and what it counts.
    # Evaluation phases ("evaluate", "processbench <file>") count batches.
    PHASES = {
        "load": ("loading the backbone", ""),
        "tokenize": ("tokenizing", "solutions"),
        "features": ("extracting features", "solutions"),
        "train": ("training", "steps"),
        "evaluate": ("evaluating", "batches"),
        "done": ("done", ""),
    }
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )

    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField(default=dict, help_text="The effective TrainConfig.")
    dataset_version = models.CharField(
        max_length=64, blank=True, help_text="sha256 of the training data."
    )
    dataset_description = models.JSONField(
        default=dict, blank=True, help_text="Filters and counts of the data."
    )
    phase = models.CharField(max_length=32, blank=True)
    # How far the phase is, in its unit (PHASES): what the page shows while no step is trained.
    phase_done = models.PositiveIntegerField(default=0)
    phase_total = models.PositiveIntegerField(default=0)
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    loss_curve = models.JSONField(default=list, blank=True, help_text="[[step, loss], ...]")
    metrics = models.JSONField(default=dict, blank=True)
    output_dir = models.CharField(max_length=500, blank=True)
    # False when it failed before training for a reason that would fail it again (no data, a
    # config or backbone the worker cannot use): no Resume, a new run is needed.
    resumable = models.BooleanField(default=True)
    cancel_requested = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or f"run {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.CANCELLED)

    @property
    def progress_percent(self) -> int:
        return int(100 * self.step / self.total_steps) if self.total_steps else 0

    @property
    def phase_label(self) -> str:
        return self.PHASES.get(self.phase, (self.phase, ""))[0]

    @property
    def phase_progress(self) -> str:
        """How far the phase is, e.g. "1200 / 4000 solutions" ("" when it counts nothing)."""
        unit = self.PHASES.get(self.phase, ("", "batches"))[1]
        if not (unit and self.phase_total):
            return ""
        return f"{self.phase_done} / {self.phase_total} {unit}"

    @property
    def phase_percent(self) -> int:
        return int(100 * self.phase_done / self.phase_total) if self.phase_total else 0

    @property
    def folder(self) -> Path:
        """Where its frozen data (`DATA_FILE`), model and checkpoints live."""
        return Path(settings.MEDIA_ROOT) / "runs" / f"run-{self.pk}"

    @property
    def objective(self) -> str:
        """process (a PRM, the default) or outcome (an ORM), from its effective config."""
        return str((self.config or {}).get("objective") or Objective.PROCESS)

    def mark_cancelled(self) -> bool:
        """Its worker stopped at a user's request (`cancel_requested`): CANCELLED, no error."""
        return self._end(self.Status.CANCELLED, "", {})


class Objective(models.TextChoices):
    """What a model learns (TrainConfig.objective): step ratings, or a solution's final-answer
    correctness read at its last token."""

    PROCESS = "process", "process (PRM)"
    OUTCOME = "outcome", "outcome (ORM)"


class ModelVersion(models.Model):
    Objective = Objective

    class Kind(models.TextChoices):
        """Trained here (prm.json), or imported from elsewhere (`import_prm`: external.json)."""

        TRAINED = "trained", "trained here"
        TOKEN_CLASSIFICATION = "token_classification", "imported token-classification PRM"
        STEP_TAG = "step_tag", "imported step-tag PRM"
        SEQUENCE_CLASSIFICATION = "sequence_classification", "imported sequence-classification ORM"

    run = models.OneToOneField(
        TrainingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="model_version"
    )
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    name = models.CharField(max_length=200)
    backbone = models.CharField(max_length=300)
    artifact_path = models.CharField(max_length=500)
    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.TRAINED)
    objective = models.CharField(
        max_length=16,
        choices=Objective.choices,
        default=Objective.PROCESS,
        help_text="What it learned: step ratings (a PRM) or final-answer correctness (an ORM).",
    )
    source = models.CharField(
        max_length=500, blank=True, help_text="Where an imported model was imported from."
    )
    dataset_version = models.CharField(max_length=64, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    passed_evaluation = models.BooleanField(default=False)
    is_active = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"], condition=Q(is_active=True), name="one_active_model_per_project"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def active(cls, project_id: int | None = None) -> ModelVersion | None:
        """The project's active model (the Default project's when none is named)."""
        if project_id is None:
            return cls.objects.filter(is_active=True, project__slug=DEFAULT_SLUG).first()
        return cls.objects.filter(is_active=True, project_id=project_id).first()

    @property
    def is_outcome(self) -> bool:
        return self.objective == Objective.OUTCOME

    def activate(self) -> None:
        """Make this the active model; refused unless it passed its evaluation. An ORM is
        compared, never activated: the loop selects and scores with a PRM's step scores."""
        if self.is_outcome:
            raise ValueError(
                f"{self} is an outcome model (ORM): it is compared by best-of-N, not activated; "
                "the active model is a PRM"
            )
        if not self.passed_evaluation:
            raise ValueError(f"{self} did not pass its evaluation and cannot become active")
        with transaction.atomic():
            ModelVersion.objects.select_for_update().filter(
                is_active=True, project=self.project_id
            ).exclude(pk=self.pk).update(is_active=False)
            self.is_active = True
            self.activated_at = timezone.now()
            self.save(update_fields=["is_active", "activated_at"])


class ModelExport(QueuedWork):
    """A model version as a Hugging Face checkpoint zip, built by a task
    (`modeling.services.exporting`): at most one waiting or running per version, and a finished
    one is reused while its archive is on disk. A worker that died mid-export leaves it RUNNING
    with an old heartbeat: the sweeper sends it again and `claim` takes it over."""

    Status = QueuedStatus
    OPEN = (QueuedStatus.QUEUED, QueuedStatus.RUNNING)

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="exports")
    phase = models.CharField(max_length=32, blank=True)
    archive_path = models.CharField(
        max_length=500, blank=True, help_text="The zip, relative to MEDIA_ROOT."
    )
    size_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "Hugging Face export"
        constraints = [
            models.UniqueConstraint(
                fields=["version"],
                condition=Q(status__in=["queued", "running"]),
                name="one_open_export_per_version",
            ),
        ]

    def __str__(self) -> str:
        return f"Hugging Face export {self.pk} of {self.version_id}"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def folder(self) -> Path:
        """Where its attempt builds the checkpoint and its zip lies."""
        return Path(settings.MEDIA_ROOT) / "exports" / f"export-{self.pk}"

    @property
    def archive(self) -> Path | None:
        """The finished zip, if it is still on disk."""
        if self.status != self.Status.SUCCEEDED or not self.archive_path:
            return None
        path = Path(settings.MEDIA_ROOT) / self.archive_path
        return path if path.is_file() else None


class EvaluationSet(models.Model):
    """A frozen set of problems every gate scores the new and the active model on.

    Chosen by problem among those no training run had in its data; their completed labelings
    are written once as PRM800K lines (`file_path`, checked by `sha256`) and no run started
    while it is current trains on them. Renewing adds a new current version; old ones stay so
    runs that used them can still be read.
    """

    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    version = models.PositiveIntegerField()
    problem_ids = models.JSONField(default=list, help_text="Problem ids in the set.")
    file_path = models.CharField(max_length=500, help_text="The frozen PRM800K lines.")
    sha256 = models.CharField(max_length=64)
    row_count = models.PositiveIntegerField(default=0, help_text="Labelings (lines).")
    step_count = models.PositiveIntegerField(default=0, help_text="Rated steps.")
    seed = models.IntegerField(default=0)
    is_current = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"],
                condition=Q(is_current=True),
                name="one_current_evaluation_set_per_project",
            ),
            models.UniqueConstraint(
                fields=["project", "version"], name="evaluation_set_version_per_project"
            ),
        ]

    def __str__(self) -> str:
        return f"evaluation set v{self.version}"

    @classmethod
    def current(cls, project_id: int | None = None) -> EvaluationSet | None:
        """The project's current set (the Default project's when none is named)."""
        if project_id is None:
            return cls.objects.filter(is_current=True, project__slug=DEFAULT_SLUG).first()
        return cls.objects.filter(is_current=True, project_id=project_id).first()

    @property
    def path(self) -> Path:
        return Path(settings.MEDIA_ROOT) / self.file_path

    def reference(self) -> dict:
        """How a run, a gate or a report names the set it was measured on."""
        return {
            "id": self.pk,
            "version": self.version,
            "sha256": self.sha256,
            "problems": len(self.problem_ids),
        }


class SolutionScore(models.Model):
    """A model version's verdict on one solution: per-step probabilities and the aggregate."""

    solution = models.ForeignKey(
        "labeling.Solution", on_delete=models.CASCADE, related_name="scores"
    )
    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="scores")
    score = models.FloatField(help_text="Product over steps of P(+1) + P(0), the paper's best.")
    min_step_score = models.FloatField(null=True, blank=True)
    step_probs = models.JSONField(help_text="Per step [P(-1), P(0), P(+1)].")
    uncertainty = models.FloatField(
        null=True,
        blank=True,
        help_text="How much an ensemble of heads on this model's features disagrees (the "
        "uncertainty rule's score); empty until a generation with that rule measured it.",
    )
    ensemble_heads = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Heads in the ensemble that measured the uncertainty."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["solution", "model_version"], name="one_score_per_model"
            ),
        ]
        indexes = [models.Index(fields=["model_version", "-score"], name="score_rank_idx")]


# --- candidate pool and the active-learning loop ------------------------------------------------
#
# The pool is Solution rows with no batch plus a PoolEntry each: unlabeled candidates, graded on
# import (Solution.answer_correct). Enqueueing a selected candidate sets its batch and generation;
# it stays in the pool table (its PoolEntry) so a generation's provenance is never lost.


class PoolEntry(models.Model):
    """A candidate solution imported into the pool (not in any queue until selected)."""

    solution = models.OneToOneField(
        "labeling.Solution", on_delete=models.CASCADE, related_name="pool_entry"
    )
    extracted_answer = models.TextField(
        null=True, blank=True, help_text="What grading read as the final answer."
    )
    source = models.CharField(max_length=500, blank=True, help_text="The file it came from.")
    sampling_run = models.ForeignKey(
        "SamplingRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="entries",
        help_text="The generate_pool run that sampled it (its generator and sampling parameters).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "pool entries"


class SamplingRun(QueuedWork):
    """`generate_pool`: N solutions per problem from the generator, graded, into the pool.

    `problem_ids` is fixed when the run is created and `next_index` moves past a problem in the
    transaction that writes its solutions, so a resumed or redelivered run goes on from the
    first problem not written, and never samples one twice."""

    Status = RunStatus
    OPEN = (RunStatus.QUEUED, RunStatus.RUNNING)

    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    samples = models.PositiveSmallIntegerField(help_text="Solutions sampled per problem.")
    sampling = models.JSONField(help_text="max_tokens, temperature, top_p, seed.")
    filters = models.JSONField(default=dict, blank=True, help_text="How the problems were chosen.")
    generator = models.CharField(max_length=200, blank=True, help_text="Filled when it starts.")
    problem_ids = models.JSONField(help_text="The problems to sample, in order.")
    next_index = models.PositiveIntegerField(default=0, help_text="Problems done.")
    added = models.PositiveIntegerField(default=0, help_text="Solutions added to the pool.")
    graded_correct = models.PositiveIntegerField(default=0)
    graded_wrong = models.PositiveIntegerField(default=0)
    incomplete = models.PositiveIntegerField(
        default=0, help_text="Samples with no final answer (cut by max_tokens): not added."
    )
    duplicates = models.PositiveIntegerField(default=0)
    # The generator's measured speed, which the sampling page estimates the next run's time from.
    generated_samples = models.PositiveIntegerField(
        default=0, help_text="Samples generated so far, complete or not."
    )
    generated_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Their tokens (counted with SmolLM2's tokenizer)."
    )
    generating_seconds = models.FloatField(
        default=0.0, help_text="Wall-clock seconds the generator took for them."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"sampling run {self.pk}"

    @property
    def total(self) -> int:
        return len(self.problem_ids)

    @property
    def percent(self) -> int:
        return int(100 * self.next_index / self.total) if self.total else 100

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN


class GenerationRun(QueuedWork):
    """One turn of the loop: retrain -> score the pool -> select -> enqueue, step by step.

    `current_step` is the step to run next (or the one that failed); a worker claims it with a
    conditional update from QUEUED to RUNNING, so a redelivered task is a no-op. A failure keeps
    `current_step`, and `retry` re-queues exactly that step. A step whose worker is gone is not
    taken over: `pipeline.fail_stale_generations` fails it, and a lead retries it.
    """

    Status = RunStatus
    TAKES_OVER_STALE = False

    class Step(models.TextChoices):
        RETRAIN = "retrain", "retrain on all labels"
        SCORE = "score", "score the pool"
        SELECT = "select", "select solutions"
        ENQUEUE = "enqueue", "enqueue the batch"
        DONE = "done", "done"

    class Trigger(models.TextChoices):
        PAGE = "page", "page"
        API = "api", "API"
        CLI = "cli", "command line"
        AUTO = "auto", "labeled to the set fraction"

    STEPS = (Step.RETRAIN, Step.SCORE, Step.SELECT, Step.ENQUEUE)
    OPEN = (Status.QUEUED, Status.RUNNING, Status.FAILED)

    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    generation = models.IntegerField(help_text="The generation number this run prepares.")
    current_step = models.CharField(max_length=16, choices=Step.choices, default=Step.RETRAIN)
    steps = models.JSONField(
        default=dict, blank=True, help_text="Per step: status, progress, timings, detail."
    )
    params = models.JSONField(
        default=dict, blank=True, help_text="Selection and training parameters."
    )
    trigger = models.CharField(max_length=8, choices=Trigger.choices, default=Trigger.PAGE)
    training_run = models.ForeignKey(
        TrainingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    model_version = models.ForeignKey(
        ModelVersion,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The model whose scores chose this generation (pinned when scoring starts).",
    )
    batch = models.OneToOneField(
        "labeling.Batch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="generation_run",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-generation"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "generation"], name="generation_per_project"
            ),
        ]

    def __str__(self) -> str:
        return f"generation {self.generation}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.CANCELLED)

    @property
    def rule_label(self) -> str:
        """The selection rule as a page says it, with a mix's shares."""
        rule = (self.params or {}).get("rule") or "convincing_wrong"
        shares = (self.params or {}).get("shares") or {}
        # In the order the rules fill a mix (jsonb keeps no order of keys).
        parts = ", ".join(
            f"{name.replace('_', ' ')} {shares[name]:g}" for name in MIX_RULES if name in shares
        )
        return rule.replace("_", " ") + (f" ({parts})" if parts else "")

    @property
    def retrain_gate(self) -> dict | None:
        """What the retrain step recorded of the new model's gate (`pipeline._retrain_detail`),
        None before it is done or when the generation did not retrain."""
        detail = (self.steps.get(self.Step.RETRAIN) or {}).get("detail")
        return detail if detail and "passed_evaluation" in detail else None

    def step_rows(self) -> list[dict]:
        """The four steps in order, each with its recorded state (for pages and the API)."""
        rows = []
        for step in self.STEPS:
            state = dict(self.steps.get(step, {}))
            state.setdefault("status", "pending")
            done, total = state.get("done"), state.get("total")
            state["percent"] = int(100 * done / total) if done is not None and total else None
            rows.append({"name": step.value, "label": step.label, **state})
        return rows


class SelectionReason(models.Model):
    """Why a solution was put into a generation: the model, its score, rank and rule."""

    generation_run = models.ForeignKey(
        GenerationRun, on_delete=models.CASCADE, related_name="selections"
    )
    solution = models.ForeignKey(
        "labeling.Solution", on_delete=models.CASCADE, related_name="selection_reasons"
    )
    model_version = models.ForeignKey(
        ModelVersion, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    score = models.FloatField(
        help_text="The PRM's score; for an uncertainty pick, the ensemble's disagreement; for a "
        "disagreement pick, the judges' and the PRM's disagreement."
    )
    rank = models.PositiveIntegerField()
    rule = models.CharField(
        max_length=32,
        help_text="convincing_wrong, convincing, uncertainty, disagreement or uniform.",
    )
    correct = models.BooleanField(
        null=True, blank=True, help_text="The graded answer when selected."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["generation_run", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["generation_run", "solution"], name="one_reason_per_run"
            ),
            models.UniqueConstraint(fields=["generation_run", "rank"], name="one_rank_per_run"),
        ]

    @property
    def rule_label(self) -> str:
        return self.rule.replace("_", " ")

    @property
    def score_label(self) -> str:
        """What `score` measures for this pick's rule."""
        if self.rule == "disagreement":
            return "judge disagreement"
        return "ensemble disagreement" if self.rule == "uncertainty" else "PRM score"


class BestOfNComparison(QueuedWork):
    """Best-of-N accuracy of two or more model versions side by side (PRM aggregates, the ORM,
    majority, PRM-weighted majority, pass@N), on a sampling run's solutions or a best-of-N file
    under STEPWISE_DATA_ROOT, computed by a gpu task (`modeling.services.best_of_n`). Models
    not on equal footing (different backbone, training problems or steps) are refused unless
    `allow_mismatch`, and then the report says what differed."""

    Status = QueuedStatus
    OPEN = (QueuedStatus.QUEUED, QueuedStatus.RUNNING)

    model_ids = models.JSONField(help_text="The model versions compared, in order.")
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    sampling_run = models.ForeignKey(
        SamplingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    input_path = models.CharField(
        max_length=500, blank=True, help_text="A best-of-N samples file under the data root."
    )
    ns = models.JSONField(default=list, blank=True, help_text="The Ns asked for; empty: 1, 2, 4…")
    allow_mismatch = models.BooleanField(default=False)
    phase = models.CharField(max_length=32, blank=True)
    report = models.JSONField(default=dict, blank=True)
    png_path = models.CharField(
        max_length=500, blank=True, help_text="The curves' PNG, relative to MEDIA_ROOT."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "best-of-N comparison"

    def __str__(self) -> str:
        return f"best-of-N comparison {self.pk}"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def folder(self) -> Path:
        return Path(settings.MEDIA_ROOT) / "best-of-n" / f"comparison-{self.pk}"

    @property
    def png(self) -> Path | None:
        """The curves' PNG, if it is on disk."""
        if not self.png_path:
            return None
        path = Path(settings.MEDIA_ROOT) / self.png_path
        return path if path.is_file() else None


class PreLabelRun(QueuedWork):
    """A judge's pass over a batch's solutions (issue 46): one labeling.PreLabel per solution,
    written one solution per transaction, so a killed worker loses at most one solution's work
    and a resumed or redelivered run skips the solutions this run has judged.

    `options` holds what the judge was run with: prm's model version and thresholds (chosen on
    the current evaluation set when the run starts, with their kappa), llm's critic template,
    mc's k and max_steps; max_solutions for all. `estimate` is what the product showed before
    it started (mc: completions and tokens at most)."""

    Status = QueuedStatus
    OPEN = (QueuedStatus.QUEUED, QueuedStatus.RUNNING)

    class Kind(models.TextChoices):
        PRM = "prm", "prm (a PRM model version)"
        LLM = "llm", "llm (a critic prompt)"
        MC = "mc", "mc (Monte-Carlo rollouts)"

    batch = models.ForeignKey(
        "labeling.Batch",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="Empty: the candidate pool's selectable solutions (for the routing rule).",
    )
    # Its own project (a pool run has no batch): the batch's, or the pool's.
    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    judge = models.CharField(max_length=200, blank=True, help_text="Filled when it starts.")
    options = models.JSONField(default=dict, blank=True)
    solution_ids = models.JSONField(default=list, help_text="The solutions to judge, in order.")
    done = models.PositiveIntegerField(default=0, help_text="Solutions judged.")
    total = models.PositiveIntegerField(default=0)
    no_label = models.PositiveIntegerField(
        default=0, help_text="Solutions the judge could not label (timeout, garbage, bad step)."
    )
    estimate = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"pre-label run {self.pk}"

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 100

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN
