"""The generator as the app configures it, and what the app asks of it.

`generator_from_settings` builds the client for STEPWISE_GENERATOR_URL, or the local SmolLM2
backend when it is unset; one generator per process, so the local model loads once.
Sampling runs (`generate_pool`) fill the active-learning pool with the generator's solutions,
graded against the ground truth, one problem per transaction.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from labeling.models import Batch, Problem, ProposedSteps, Solution
from labeling.models.projects import default_project_id, in_project
from labeling.services import alternatives, importing
from labeling.services.alternatives import MAX_STEP_CHARS
from modeling.generator import (
    Generator,
    LocalGenerator,
    NextSteps,
    OpenAICompatibleGenerator,
    SampledSolution,
    Sampling,
    map_concurrently,
    next_steps,
    sample_solutions,
)
from modeling.grading import is_equivalent
from modeling.models import PoolEntry, RunStatus, SamplingRun
from stepwise.celery import model_tasks_in_thread, resend_rows, start_on_commit
from stepwise.queued import failure_text

logger = logging.getLogger(__name__)


@functools.cache
def generator_from_settings() -> Generator:
    if settings.STEPWISE_GENERATOR_URL:
        return OpenAICompatibleGenerator(
            base_url=settings.STEPWISE_GENERATOR_URL,
            model=settings.STEPWISE_GENERATOR_MODEL,
            api_key=settings.STEPWISE_GENERATOR_API_KEY,
            timeout_s=settings.STEPWISE_GENERATOR_TIMEOUT_S,
            max_retries=settings.STEPWISE_GENERATOR_RETRIES,
            concurrency=settings.STEPWISE_GENERATOR_CONCURRENCY,
        )
    return LocalGenerator()


def generator_description() -> str:
    """What pages say about the configured generator, without loading a model."""
    if settings.STEPWISE_GENERATOR_URL:
        model = settings.STEPWISE_GENERATOR_MODEL or "its served model"
        return f"{model} at {settings.STEPWISE_GENERATOR_URL}"
    return "the local SmolLM2-135M (STEPWISE_GENERATOR_URL is unset)"


def sampling_from_settings(*, max_tokens: int | None = None, **overrides) -> Sampling:
    return Sampling(
        max_tokens=max_tokens or settings.STEPWISE_GENERATOR_MAX_TOKENS,
        temperature=overrides.get("temperature", settings.STEPWISE_GENERATOR_TEMPERATURE),
        top_p=overrides.get("top_p", settings.STEPWISE_GENERATOR_TOP_P),
        seed=overrides.get("seed"),
    )


def propose_next_steps(
    *,
    problem: str,
    prefix: Sequence[str],
    k: int,
    known: Sequence[str] = (),
    on_step: Callable[[list[str]], None] | None = None,
    keep_going: Callable[[], bool] | None = None,
) -> tuple[str, NextSteps]:
    """Candidate next steps for a labeler (the alternatives protocol): the generator's name and
    up to `k` distinct steps, the `known` ones first, each told to `on_step` as it is found;
    generation stops once `keep_going()` says nobody waits. Raises
    modeling.generator.GeneratorError when the generator cannot answer."""
    generator = generator_from_settings()
    sampling = sampling_from_settings(
        max_tokens=settings.STEPWISE_GENERATOR_STEP_MAX_TOKENS,
        seed=settings.STEPWISE_GENERATOR_SEED,
    )
    found = next_steps(
        generator,
        problem=problem,
        prefix=prefix,
        k=k,
        sampling=sampling,
        known=known,
        on_step=on_step,
        keep_going=keep_going,
    )
    return generator.name, found


def fill_proposal(
    proposal_id: int, *, progress: Callable[[ProposedSteps], None] | None = None
) -> ProposedSteps | None:
    """Answer a labeler's request for candidate next steps (`labeling.services.alternatives`
    sends it as the task `modeling.tasks.generate_proposal`); None when another worker has it,
    it is done (a redelivery) or it was stopped before its turn. Each candidate is stored as its
    sample ends, while the request is still running, so the page shows it at once; the
    generator stops when nobody waits for the prefix any more (STOPPED, sent again when someone
    reaches it). A generator that fails marks it failed, keeping what it had found: the page
    says so. `progress` sees the row each time a candidate is stored. Once through, the
    labeler's next request waiting for a task is sent."""
    try:
        return _fill_proposal(proposal_id, progress)
    finally:
        alternatives.proposal_task_done(proposal_id)


def _fill_proposal(
    proposal_id: int, progress: Callable[[ProposedSteps], None] | None
) -> ProposedSteps | None:
    if not ProposedSteps.objects.filter(pk=proposal_id, status=ProposedSteps.Status.PENDING).update(
        status=ProposedSteps.Status.RUNNING
    ):
        return None
    proposal = ProposedSteps.objects.select_related("problem").get(pk=proposal_id)
    update: dict[str, Any]
    try:
        name = generator_from_settings().name[:200]

        def store(steps: list[str]) -> None:
            _store_found(proposal_id, steps, name)
            if progress is not None:
                progress(ProposedSteps.objects.get(pk=proposal_id))

        _, found = propose_next_steps(
            problem=proposal.problem.text,
            prefix=list(proposal.prefix),
            k=proposal.k,
            known=list(proposal.steps),
            on_step=store,
            keep_going=lambda: alternatives.proposal_wanted(proposal_id),
        )
        steps = _store_found(proposal_id, found.steps, name)
        update = {"dropped": dict(found.dropped), "generator": name}
        if found.dropped["abandoned"]:
            update["status"] = ProposedSteps.Status.STOPPED
        elif steps:
            update.update(status=ProposedSteps.Status.READY, ready_at=timezone.now())
        else:
            update.update(status=ProposedSteps.Status.FAILED, error="The generator gave no step.")
    except Exception as exc:  # the page says so and offers to try again
        logger.warning("proposal %s failed: %s", proposal_id, exc)
        update = {"status": ProposedSteps.Status.FAILED, "error": failure_text(exc), "dropped": {}}
    # Only the run that holds it: a request reset meanwhile (sent again) is another run's.
    ProposedSteps.objects.filter(pk=proposal_id, status=ProposedSteps.Status.RUNNING).update(
        **update
    )
    return ProposedSteps.objects.filter(pk=proposal_id).first()  # None: deleted meanwhile


def _store_found(proposal_id: int, steps: list[str], generator: str) -> list[str]:
    """Append the candidates not stored yet to a running request, up to its k; the stored
    list is only ever appended to (a labeler's ratings refer to candidates by position), even
    by two runs of one request. Returns the stored list."""
    with transaction.atomic():
        row = (
            ProposedSteps.objects.select_for_update()
            .filter(pk=proposal_id, status=ProposedSteps.Status.RUNNING)
            .only("steps", "k")
            .first()
        )
        if row is None:
            return []
        stored = list(row.steps)
        for step in (step[:MAX_STEP_CHARS] for step in steps):
            if step not in stored and len(stored) < row.k:
                stored.append(step)
        if stored != row.steps:
            ProposedSteps.objects.filter(pk=proposal_id).update(steps=stored, generator=generator)
        return stored


# --- generate_pool: sampling runs -----------------------------------------------------------


class SamplingError(Exception):
    """A request generate_pool refuses (no problems match, bad parameters)."""


def choose_problems(
    *,
    problem_ids: Sequence[int] | None = None,
    batch_id: int | None = None,
    subject: str | None = None,
    level: int | None = None,
    limit: int | None = None,
    project_id: int | None = None,
) -> list[int]:
    """Problem ids to sample, in id order: the given ids, a batch's problems (a batch of the
    project; the Default one where None is named), a subject and level; problems with no ground
    truth are left out (a sample could not be graded). Problems are shared by the projects
    (public text, docs/architecture.md); the samples go into the project's pool."""
    problems = Problem.objects.exclude(ground_truth_answer__isnull=True).exclude(
        ground_truth_answer=""
    )
    if problem_ids:
        problems = problems.filter(pk__in=problem_ids)
    if batch_id is not None:
        if not Batch.objects.filter(pk=batch_id, **in_project(project_id)).exists():
            raise SamplingError(f"There is no batch {batch_id}.")
        problems = problems.filter(solutions__batch_id=batch_id)
    if subject:
        problems = problems.filter(subject__iexact=subject)
    if level is not None:
        problems = problems.filter(level=level)
    ids = list(problems.order_by("pk").values_list("pk", flat=True).distinct())
    if problem_ids:
        missing = sorted(set(problem_ids) - set(ids))
        if missing:
            raise SamplingError(
                f"No problem with a ground truth answer has id {', '.join(map(str, missing))}."
            )
    if limit is not None:
        ids = ids[:limit]
    if not ids:
        raise SamplingError("No problem with a ground truth answer matches these filters.")
    return ids


def create_sampling_run(
    *,
    samples: int,
    problem_ids: Sequence[int] | None = None,
    batch_id: int | None = None,
    subject: str | None = None,
    level: int | None = None,
    limit: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    user=None,
    send: bool = True,
    project_id: int | None = None,
) -> SamplingRun:
    """A run sampling `samples` solutions for each chosen problem; sent to the generate queue
    (a thread of this process in the embedded default) unless `send` is False (the command
    runs it itself)."""
    if not 1 <= samples <= 64:
        raise SamplingError("samples must be between 1 and 64 per problem.")
    if limit is not None and limit < 1:
        raise SamplingError("limit must be at least 1.")
    overrides = {"temperature": temperature, "top_p": top_p, "seed": seed}
    sampling = sampling_from_settings(
        max_tokens=max_tokens, **{key: v for key, v in overrides.items() if v is not None}
    )
    if not 1 <= sampling.max_tokens <= 8192:
        raise SamplingError("max_tokens must be between 1 and 8192.")
    if not 0 <= sampling.temperature <= 2 or not 0 < sampling.top_p <= 1:
        raise SamplingError("temperature must be in [0, 2] and top_p in (0, 1].")
    filters = {
        "problems": list(problem_ids or []),
        "batch": batch_id,
        "subject": subject or "",
        "level": level,
        "limit": limit,
    }
    ids = choose_problems(
        problem_ids=problem_ids,
        batch_id=batch_id,
        subject=subject,
        level=level,
        limit=limit,
        project_id=project_id,
    )
    with transaction.atomic():
        run = SamplingRun.objects.create(
            project_id=project_id if project_id is not None else default_project_id(),
            samples=samples,
            sampling=sampling.as_dict(),
            filters={key: value for key, value in filters.items() if value not in (None, "", [])},
            problem_ids=ids,
            created_by=user if user is not None and user.is_authenticated else None,
        )
        if send:
            _send(run.pk)
    return run


SAMPLING_TASK = "modeling.tasks.generate_pool_run"


def _send(run_id: int) -> None:
    """Send the run to the generate queue once the transaction commits (a thread of this process
    in the embedded default). A broker that cannot be reached leaves it queued and marked
    UNSENT; `sampling_runs_resend` sends it when the broker is back."""
    start_on_commit(SAMPLING_TASK, run_id, row=SamplingRun)


def sampling_runs_resend(now=None) -> int:
    """Send again the queued sampling runs whose task will not come by itself (UNSENT, or sent
    more than STEPWISE_RESEND_AFTER_SECONDS ago); returns how many. A duplicate is harmless:
    the run is claimed with a conditional update."""
    if model_tasks_in_thread():
        return 0  # no broker: runs go to threads of the process that started them
    return resend_rows(SamplingRun.objects.waiting_too_long(now), SAMPLING_TASK, now=now)


def resume_sampling_run(run: SamplingRun) -> SamplingRun:
    """Send a failed or cancelled run again, or one whose worker died (no heartbeat for
    STEPWISE_RUN_STALE_SECONDS): it goes on from the first problem not written."""
    stopped = SamplingRun.objects.filter(status__in=[RunStatus.FAILED, RunStatus.CANCELLED])
    with transaction.atomic():
        if not (stopped | SamplingRun.objects.claimable()).filter(pk=run.pk).requeue():
            raise SamplingError(f"Sampling run {run.pk} is {run.status}: nothing to resume.")
        _send(run.pk)
    run.refresh_from_db()
    return run


def cancel_sampling_run(run: SamplingRun) -> SamplingRun:
    """Stop after the problem being sampled; what was written stays in the pool."""
    SamplingRun.objects.filter(pk=run.pk, status__in=SamplingRun.OPEN).update(
        status=RunStatus.CANCELLED, finished_at=timezone.now()
    )
    run.refresh_from_db()
    return run


def execute_sampling_run(
    run_id: int, *, progress: Callable[[SamplingRun], None] | None = None
) -> SamplingRun | None:
    """Run (or go on with) a sampling run; None when another worker has it or it is finished.

    Claimed with a conditional update, so a redelivered task does nothing. Problems go to the
    generator `concurrency` at a time; each problem's solutions and `next_index` are written
    in one transaction. A generator error fails the run, resumable where it stopped."""
    # Queued, or running on a worker that has gone quiet (killed: its task came back); started
    # is this attempt's start.
    run = SamplingRun.claim(run_id, started_at=timezone.now())
    if run is None:
        return None
    try:
        generator = generator_from_settings()
        SamplingRun.objects.filter(pk=run_id).update(generator=generator.name)
        run.generator = generator.name
        sampling = Sampling(**run.sampling)
        while run.next_index < run.total:
            chunk = run.problem_ids[run.next_index : run.next_index + generator.concurrency]
            problems = Problem.objects.in_bulk(chunk)
            started = time.monotonic()
            sampled = map_concurrently(
                generator,
                functools.partial(_sample_problem, generator, run.samples, sampling),
                [problems[problem_id] for problem_id in chunk],
            )
            _record_speed(run.pk, sampled, time.monotonic() - started)
            for problem_id, solutions in zip(chunk, sampled, strict=True):
                if not _write_problem(run, problems[problem_id], solutions):
                    return run  # cancelled meanwhile
                if progress is not None:
                    progress(run)
        run.mark_succeeded()
    except Exception as exc:
        logger.exception("sampling run %s failed", run_id)
        run.mark_failed(exc)
    run.refresh_from_db()
    return run


@functools.cache
def _token_counter() -> Callable[[str], int] | None:
    """SmolLM2's tokenizer as the one unit of tokens for every generator (an estimate, not the
    served model's own count); None where it cannot be loaded (nothing is measured then)."""
    try:
        from transformers import AutoTokenizer

        from modeling.training.backbones import smollm2_folder

        tokenizer = AutoTokenizer.from_pretrained(
            smollm2_folder(), local_files_only=True, trust_remote_code=False
        )
    except Exception:  # no tokenizer here: the page says "no measurement yet"
        logger.warning("no tokenizer to count generated tokens with", exc_info=True)
        return None
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _record_speed(run_id: int, sampled: list[list[SampledSolution]], seconds: float) -> None:
    count = _token_counter()
    if count is None:
        return
    solutions = [solution for batch in sampled for solution in batch]
    SamplingRun.objects.filter(pk=run_id).update(
        generated_samples=F("generated_samples") + len(solutions),
        generated_tokens=F("generated_tokens") + sum(count(s.text) for s in solutions),
        generating_seconds=F("generating_seconds") + seconds,
    )


@dataclass(frozen=True)
class Estimate:
    """How long a sampling run should take, from the generator's measured speed."""

    generator: str
    samples: int  # samples the run asks for
    tokens_per_s: float | None  # None: no run of this generator measured yet
    tokens_per_sample: float | None
    seconds: float | None  # at the measured tokens per sample
    seconds_at_most: float | None  # if every sample ran to max_tokens
    measured_runs: int

    @property
    def ms(self) -> int | None:  # for the pages' duration_ms
        return None if self.seconds is None else round(self.seconds * 1000)

    @property
    def ms_at_most(self) -> int | None:
        return None if self.seconds_at_most is None else round(self.seconds_at_most * 1000)


def estimate(*, problems: int, samples: int, max_tokens: int | None = None) -> Estimate:
    """The time `problems` x `samples` samples should take with the configured generator, from
    its last runs' measured tokens/s and tokens per sample (max_tokens bounds it above)."""
    name = generator_from_settings().name
    max_tokens = max_tokens or settings.STEPWISE_GENERATOR_MAX_TOKENS
    measured = list(
        SamplingRun.objects.filter(generator=name, generated_tokens__gt=0)
        .order_by("-pk")
        .values_list("generated_samples", "generated_tokens", "generating_seconds")[:5]
    )
    done, tokens, seconds = (
        (sum(column) for column in zip(*measured, strict=True)) if measured else (0, 0, 0.0)
    )
    n = problems * samples
    if not tokens or not done or not seconds:
        return Estimate(name, n, None, None, None, None, 0)
    per_s = tokens / seconds
    per_sample = tokens / done
    return Estimate(
        name,
        n,
        per_s,
        per_sample,
        n * per_sample / per_s,
        n * max_tokens / per_s,
        len(measured),
    )


def _sample_problem(
    generator: Generator, samples: int, sampling: Sampling, problem: Problem
) -> list[SampledSolution]:
    return sample_solutions(
        generator, problem=problem.text, n=samples, sampling=_seeded(sampling, problem.pk)
    )


def _seeded(sampling: Sampling, problem_id: int) -> Sampling:
    """A seeded run gives each problem its own seed, so a resumed run samples what it would have."""
    if sampling.seed is None:
        return sampling
    return replace(sampling, seed=sampling.seed + problem_id)


# What a sampling run's worker writes with each problem's solutions (and its heartbeat).
PROGRESS_FIELDS = (
    "next_index",
    "added",
    "graded_correct",
    "graded_wrong",
    "incomplete",
    "duplicates",
)


def _write_problem(run: SamplingRun, problem: Problem, solutions: list[SampledSolution]) -> bool:
    """Add one problem's complete samples to the pool and move past it; False if the run was
    cancelled or taken from this worker meanwhile (nothing written then)."""
    complete = [solution for solution in solutions if solution.is_complete]
    samples = [
        importing.SampleLine(
            problem_text=problem.text,
            unique_id=None,
            ground_truth_answer=None,
            steps=solution.steps,
            answer=solution.final_answer,
            generator=run.generator,
            source_id=f"sampling-run-{run.pk}/problem-{problem.pk}/{index}",
            score=None,
        )
        for index, solution in enumerate(complete)
    ]
    report = importing.ImportReport(path=f"sampling run {run.pk}")

    def grade(sample: importing.SampleLine, solution: Solution) -> PoolEntry:
        truth = problem.ground_truth_answer
        graded = bool(sample.answer and truth)
        solution.answer_correct = (
            is_equivalent(sample.answer or "", truth or "") if graded else None
        )
        return PoolEntry(extracted_answer=sample.answer, sampling_run_id=run.pk)

    def link(created: list[tuple[Solution, PoolEntry]], report: importing.ImportReport) -> None:
        for solution, entry in created:
            entry.solution_id = solution.pk
            entry.source = f"generate_pool run {run.pk}"
        PoolEntry.objects.bulk_create([entry for _, entry in created])
        report.created["graded correct"] += sum(s.answer_correct is True for s, _ in created)
        report.created["graded wrong"] += sum(s.answer_correct is False for s, _ in created)

    with transaction.atomic():
        locked = SamplingRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != RunStatus.RUNNING or locked.next_index != run.next_index:
            return False
        importing.write_solutions(
            samples,
            report,
            counted_as="pool solutions",
            prepare=grade,
            after_create=link,
            project_id=run.project_id,
        )
        run.next_index += 1
        run.added += report.created["pool solutions"]
        run.graded_correct += report.created["graded correct"]
        run.graded_wrong += report.created["graded wrong"]
        run.incomplete += len(solutions) - len(complete)
        run.duplicates += report.duplicates
        run.heartbeat(**{name: getattr(run, name) for name in PROGRESS_FIELDS})
    return True
