"""The demo: the project's own sample problems and solutions, and one account per role."""

import hashlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from labeling.models import (
    Batch,
    GoldLabel,
    Labeler,
    LabelerRecord,
    Labeling,
    Membership,
    Problem,
    Project,
    Solution,
    default_project_id,
)
from labeling.roles import ADMIN, LABELER, LEAD, RESEARCHER
from labeling.services.alternatives import add_problems
from labeling.services.importing import import_math, import_prm800k, import_samples
from labeling.services.quality import gold_label_set

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_data"
DEMO_BATCH = "Demo generation 1"
# The demo's two projects: the first (the deployment's first project, renamed; its links stay
# /p/default/) holds the demo data, the second the step-by-step (PRM800K phase 1) batch.
PHASE1_PROJECT = "MATH phase 1"
STEPS_PROJECT, STEPS_SLUG = "MATH step by step", "math-step-by-step"
DEMO_ACCOUNTS = (
    # username, password, roles (in both projects; admin: the global admin)
    ("labeler", "labeler-demo", (LABELER,)),
    ("labeler2", "labeler-demo", (LABELER,)),
    ("lead", "lead-demo", (LEAD, LABELER)),
    ("researcher", "researcher-demo", (RESEARCHER,)),
    ("admin", "admin-demo", (ADMIN,)),
    # The second project's lead, and nothing in the first.
    ("lead2", "lead2-demo", (LEAD,)),
)
SECOND_PROJECT_ONLY = {"lead2"}


def demo_projects() -> tuple[Project, Project]:
    """The demo's two projects, made or renamed once (a re-run changes nothing)."""
    first = Project.objects.get(pk=default_project_id())
    if first.name != PHASE1_PROJECT and not Project.objects.filter(name=PHASE1_PROJECT).exists():
        first.name = PHASE1_PROJECT
        first.save(update_fields=["name"])
    second, _ = Project.objects.get_or_create(slug=STEPS_SLUG, defaults={"name": STEPS_PROJECT})
    return first, second


@transaction.atomic
def create_demo_accounts() -> list[tuple[str, str, tuple[str, ...]]]:
    User = get_user_model()
    first, second = demo_projects()
    for username, password, roles in DEMO_ACCOUNTS:
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.is_staff = user.is_superuser = ADMIN in roles
            user.save()
        if ADMIN in roles:
            user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
        projects = [second] if username in SECOND_PROJECT_ONLY else [first, second]
        for project in projects:
            for role in roles:
                if role != ADMIN:
                    Membership.objects.get_or_create(project=project, user=user, role=role)
        if LABELER in roles or ADMIN in roles:
            # Demo labelers skip screening so the demo works at once; a lead's later decision stays.
            Labeler.objects.get_or_create(user=user)
            for project in projects:
                LabelerRecord.objects.get_or_create(
                    user=user, project=project, defaults={"state": LabelerRecord.State.ACTIVE}
                )
    return list(DEMO_ACCOUNTS)


def mark_demo_gold() -> str:
    """Make 18 demo solutions gold from reference_labels.jsonl: 12 quality-control, 6 screening.

    Idempotent: the same solutions are chosen every time (by position in the file).
    """
    lines = (SAMPLE_DIR / "reference_labels.jsonl").read_text(encoding="utf-8").splitlines()
    references = [json.loads(line) for line in lines if line.strip()]
    by_source = {
        s.source_id: s
        for s in Solution.objects.filter(batch__name=DEMO_BATCH, source_id__startswith="demo-")
    }
    gold = screening = 0
    for position, reference in enumerate(references):
        solution = by_source.get(reference["source_id"])
        if solution is None or position % 7 not in (3, 5):
            continue
        is_screening = position % 7 == 5 and screening < 6
        gold_label_set(
            solution=solution,
            ratings=reference["ratings"],
            screening=is_screening,
            source="sample_data/reference_labels.jsonl",
        )
        screening += is_screening
        gold += not is_screening
    return f"gold: {gold} quality-control and {screening} screening solutions from reference labels"


REFERENCE_BATCH = "Demo reference labels"
# PRM800K phase 1 in the demo: the labeler builds a solution from the local model's candidate
# steps. Inactive, so the demo's labeling queue stays as it was; a lead switches it on.
ALTERNATIVES_BATCH = "Demo step by step (alternatives)"
ALTERNATIVES_PROBLEMS = 3
REFERENCE_LABELER = "00000000-0000-4000-8000-00000000de70"


def reference_label_lines() -> list[str]:
    """The sample solutions with their reference ratings, as PRM800K (phase 2) lines: labels a
    researcher can train a PRM on in the demo without labeling first."""
    problems = {}
    for line in (SAMPLE_DIR / "problems.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        problems[record["unique_id"]] = record
    solutions = {}
    for line in (SAMPLE_DIR / "solutions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        solutions[record["source_id"]] = record
    lines = []
    for number, line in enumerate(
        (SAMPLE_DIR / "reference_labels.jsonl").read_text(encoding="utf-8").splitlines()
    ):
        reference = json.loads(line)
        solution = solutions[reference["source_id"]]
        problem = problems[solution["unique_id"]]
        steps = []
        for text, rating in zip(solution["steps"], reference["ratings"], strict=False):
            chosen = None if rating == -1 else 0  # the release leaves a -1 step unchosen
            steps.append(
                {
                    "completions": [{"text": text, "rating": rating, "flagged": False}],
                    "human_completion": None,
                    "chosen_completion": chosen,
                }
            )
        record = {
            "labeler": REFERENCE_LABELER,
            "timestamp": f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}.000000",
            "generation": 1,
            "is_quality_control_question": False,
            "is_initial_screening_question": False,
            "question": {
                "problem": problem["problem"],
                "ground_truth_solution": problem["solution"],
                "ground_truth_answer": problem["answer"],
                "pre_generated_steps": solution["steps"],
                "pre_generated_answer": solution["answer"],
                "pre_generated_verifier_score": 0.5,
            },
            "label": {
                "steps": steps,
                "total_time": 30_000 + 1000 * len(steps),
                "finish_reason": "found_error"
                if reference["first_error"] is not None
                else "solution",
            },
        }
        lines.append(json.dumps(record))
    return lines


def load_reference_labelings() -> str:
    """Import the reference labels as completed labelings of their own inactive batch."""
    batch, _ = Batch.objects.get_or_create(
        name=REFERENCE_BATCH,
        defaults={"generation": 1, "origin": Batch.Origin.IMPORT, "is_active": False},
    )
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as handle:
        handle.write("\n".join(reference_label_lines()) + "\n")
        handle.flush()
        report = import_prm800k(handle.name, batch=batch)
    made = report.created["labelings"]
    return (
        f"reference labels in {REFERENCE_BATCH!r} (to train a PRM on): "
        f"created {f'{made} labelings' if made else 'nothing new'}; "
        f"{report.duplicates} already present"
    )


def load_sample_data() -> list[str]:
    reports = [import_math(SAMPLE_DIR / "problems.jsonl")]
    reports.append(
        import_samples(
            SAMPLE_DIR / "solutions.jsonl", batch_name=DEMO_BATCH, overlap=2, generation=1
        )
    )
    return [r.summary() for r in reports] + [
        mark_demo_gold(),
        load_reference_labelings(),
        load_alternatives_batch(),
    ]


def load_alternatives_batch() -> str:
    """The step-by-step batch, in the demo's second project."""
    _, second = demo_projects()
    batch, _ = Batch.objects.get_or_create(
        project=second,
        name=ALTERNATIVES_BATCH,
        defaults={
            "protocol": Batch.Protocol.ALTERNATIVES,
            "alternatives_k": 3,
            "is_active": False,
            "origin": Batch.Origin.MANUAL,
        },
    )
    problems = Problem.objects.filter(unique_id__in=_sample_unique_ids()).order_by("pk")
    ids = list(problems.values_list("pk", flat=True)[:ALTERNATIVES_PROBLEMS])
    made = add_problems(batch=batch, problem_ids=ids)
    return (
        f"{ALTERNATIVES_BATCH!r} (inactive; a lead activates it): "
        f"{f'{made} problems to label step by step' if made else 'nothing new'}"
    )


SUGGEST_BATCH = "Demo suggest mode"
SUGGEST_SOLUTIONS = 8  # copies of the demo batch's first regular solutions


def load_suggest_batch() -> tuple[Batch, str]:
    """A batch in suggest mode (judge prm; inactive: a lead activates it) holding copies of the
    demo batch's first regular solutions; a re-run finds them present. Its pre-labels are
    written by the judge `setup_demo` runs on it (modeling's part of the demo)."""
    batch, _ = Batch.objects.get_or_create(
        name=SUGGEST_BATCH,
        defaults={
            "overlap": 2,
            "generation": 1,
            "is_active": False,
            "origin": Batch.Origin.MANUAL,
            "prelabel_mode": Batch.PrelabelMode.SUGGEST,
            "prelabel_judge": "prm",
        },
    )
    originals = Solution.objects.filter(
        batch__name=DEMO_BATCH, is_quality_control=False, is_screening=False
    ).order_by("pk")[:SUGGEST_SOLUTIONS]
    made = 0
    for original in originals:
        # Its own identity: the same steps in another batch are another solution to label.
        digest = hashlib.sha256(f"{SUGGEST_BATCH}:{original.content_sha256}".encode()).hexdigest()
        _, created = Solution.objects.get_or_create(
            content_sha256=digest,
            defaults={
                "problem_id": original.problem_id,
                "batch": batch,
                "steps": original.steps,
                "final_answer": original.final_answer,
                "verifier_score": original.verifier_score,
                "generator": original.generator,
                "source_id": f"suggest-{original.source_id}",
                "generation": batch.generation,
                "answer_correct": original.answer_correct,
            },
        )
        made += created
    line = (
        f"{SUGGEST_BATCH!r} (suggest mode, judge prm; inactive: a lead activates it): "
        f"{f'{made} solutions' if made else 'nothing new'}"
    )
    return batch, line


def _sample_unique_ids() -> list[str]:
    lines = (SAMPLE_DIR / "problems.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["unique_id"] for line in lines if line.strip()]


@dataclass(frozen=True)
class DemoPart:
    """Another app's part of the demo (modeling's candidate pool and evaluation set), handed
    in by the `setup_demo` command (modeling), since labeling never imports the apps built on
    it."""

    setup: Callable[[], list[str]]  # loads the part idempotently, returns report lines
    counts: Callable[[], dict[str, int]]  # noun -> count, as the report words it


# How each count reads in the command's report.
_NOUNS = {
    "problems": "problems",
    "solutions": "solutions",
    "batches": "batches",
    "labelings": "completed labelings",
    "gold": "gold solutions",
    "accounts": "demo accounts",
}


def _in_words(counts: dict[str, int]) -> str:
    words = [f"{n} {noun}" for noun, n in counts.items()]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


@dataclass(frozen=True)
class DemoCounts:
    """What the demo holds: its problems, the solutions and labelings of its two batches, their
    gold solutions, the other apps' parts (`others`, by noun) and the demo accounts (rows added
    by hand elsewhere are not counted)."""

    problems: int
    solutions: int
    batches: int
    labelings: int
    gold: int
    accounts: int
    others: dict[str, int] = field(default_factory=dict)

    def by_noun(self) -> dict[str, int]:
        """The counts as the report words them, the accounts last."""
        own = {_NOUNS[key]: n for key, n in asdict(self).items() if key != "others"}
        accounts = own.pop(_NOUNS["accounts"])
        return {**own, **self.others, _NOUNS["accounts"]: accounts}


def demo_counts(parts: Sequence[DemoPart] = ()) -> DemoCounts:
    unique_ids = _sample_unique_ids()
    batches = Batch.objects.filter(name__in=(DEMO_BATCH, REFERENCE_BATCH, ALTERNATIVES_BATCH))
    solutions = Solution.objects.filter(batch__in=batches)
    usernames = [username for username, _, _ in DEMO_ACCOUNTS]
    return DemoCounts(
        problems=Problem.objects.filter(unique_id__in=unique_ids).count(),
        solutions=solutions.count(),
        batches=batches.count(),
        labelings=Labeling.objects.filter(
            solution__in=solutions, status=Labeling.Status.COMPLETED
        ).count(),
        gold=GoldLabel.objects.filter(solution__in=solutions).count(),
        accounts=get_user_model().objects.filter(username__in=usernames).count(),
        others={noun: n for part in parts for noun, n in part.counts().items()},
    )


@dataclass(frozen=True)
class DemoReport:
    steps: list[str]  # one line per step: what it read, made and found
    before: DemoCounts
    after: DemoCounts
    accounts: list[tuple[str, str, tuple[str, ...]]]

    def holds(self) -> str:
        return f"The demo holds {_in_words(self.after.by_noun())}."

    def added(self) -> str:
        """What this run added; a re-run adds nothing and says so."""
        before, after = self.before.by_noun(), self.after.by_noun()
        made = {
            key: after[key] - before.get(key, 0)
            for key in after
            if after[key] != before.get(key, 0)
        }
        if not made:
            return "This run added nothing: the demo was already set up."
        return f"This run added {_in_words(made)}."


def demo_setup(parts: Sequence[DemoPart] = ()) -> DemoReport:
    """Load the sample data, the other apps' `parts` (after the problems they refer to) and
    create the demo accounts; idempotent (a re-run adds nothing)."""
    before = demo_counts(parts)
    steps = load_sample_data()
    for part in parts:
        steps += part.setup()
    accounts = create_demo_accounts()
    return DemoReport(steps=steps, before=before, after=demo_counts(parts), accounts=accounts)
