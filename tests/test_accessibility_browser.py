"""Every page of every role, in chromium: axe-core finds no WCAG 2 A/AA violation in the light
theme or the dark one, and no page is wider than a tablet (768 px) held upright.

A full-page screenshot of each page, theme and width goes to $STEPWISE_SCREENSHOT_DIR (CI keeps
it as an artifact) or to the test's own temporary folder, for a person to look at.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone

from labeling.models import (
    Batch,
    Completion,
    Labeling,
    ProposedSteps,
    Snapshot,
    StepLabel,
)
from labeling.services import alternatives, tokens
from labeling.services.rating import rate_step
from modeling.models import GenerationRun, SelectionReason
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, next_labeling
from tests.modeling.test_runs_pages import succeeded_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
    "resultTypes": ["violations"],
}
STEPS = [
    "Since $x^2 = 9$, we have $x = 3$ or $x = -3$.",
    "So $x + 5$ is $8$ or $2$.",
    "The product of the two values is $8 \\cdot 2 = 18$.",
    "# Answer\n\n18",
]
ROLES = ["signed-out", "labeler", "lead", "researcher"]
THEMES = ["light", "dark"]


def build_pages() -> dict[str, list[tuple[str, str]]]:
    """The rows every page needs, and per role (username or signed-out) its (name, path) pages."""
    lead = make_user("lea", "lead", "labeler")
    lena, lars = make_user("lena", "labeler"), make_user("lars", "labeler")
    make_user("rhea", "researcher")

    # Two labelers disagree on one solution: it waits for adjudication.
    disputed = make_solution(
        make_batch("Generation 1 · algebra", overlap=2, gold_rate=0), steps=STEPS
    )
    claim_and_label(lena, [1, 1, 1, 1])
    claim_and_label(lars, [1, 0, -1])
    # Lena finished one more and is halfway through another.
    batch = make_batch("Generation 2 · geometry", overlap=1, gold_rate=0)
    for side in (7, 11):
        problem = make_problem(
            f"What is the area of a square with side $\\sqrt{{{side}}}$?", str(side)
        )
        steps = [f"The area is $(\\sqrt{{{side}}})^2 = {side}$.", f"# Answer\n\n{side}"]
        make_solution(batch, steps=steps, problem=problem)
    finished = claim_and_label(lena, [1, 1])
    in_progress = next_labeling(lena)
    assert in_progress is not None
    rate_step(labeling_id=in_progress.pk, user=lena, step_index=0, rating=1, elapsed_ms=900)
    assert Labeling.objects.get(pk=finished.pk).status == "completed"

    run = succeeded_run(name="tiny head")
    version = run.model_version
    version.is_active = True
    version.save(update_fields=["is_active"])
    generation = GenerationRun.objects.create(
        generation=2,
        status=GenerationRun.Status.SUCCEEDED,
        current_step=GenerationRun.Step.DONE,
        steps={
            step: {"status": "done", "done": 4, "total": 4, "seconds": 1.5}
            for step in GenerationRun.STEPS
        },
        params={"k": 2, "convincing_wrong_fraction": 0.5, "per_problem_cap": 1, "scope": "pool"},
        training_run=run,
        model_version=version,
        batch=batch,
        created_by=lead,
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    for rank, solution in enumerate(batch.solutions.all(), start=1):
        SelectionReason.objects.create(
            generation_run=generation,
            solution=solution,
            model_version=version,
            score=0.9 / rank,
            rank=rank,
            rule="convincing_wrong" if rank == 1 else "convincing",
            correct=rank != 1,
        )
    Snapshot.objects.create(status=Snapshot.Status.DONE, sha256="0" * 64, row_count=3)

    # Lea (a lead who labels) is building a solution step by step: one candidate rated, one to
    # go. Not Lena: she has a labeling open already, and a labeler has one open at a time.
    phase1 = make_batch(
        "Phase 1 · arithmetic", protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2
    )
    sum_problem = make_problem("What is $2 + 3$?", "5")
    alternatives.add_problems(batch=phase1, problem_ids=[sum_problem.pk])
    step_by_step = Labeling.objects.create(
        solution=phase1.solutions.get(), labeler=lead, lease_expires_at=timezone.now()
    )
    candidates = ["I add: $2 + 3 = 5$.", "# Answer\n\n5"]
    ProposedSteps.objects.create(
        problem=sum_problem,
        prefix=[],
        prefix_sha256=alternatives.prefix_hash([]),
        k=2,
        status=ProposedSteps.Status.READY,
        steps=candidates,
        generator="SmolLM2-135M-Instruct (local)",
    )
    first = StepLabel.objects.create(labeling=step_by_step, index=0)
    Completion.objects.create(step=first, index=0, text=candidates[0], rating=1)

    tokens.token_create(user=lena, name="nightly export", expires_in=timedelta(days=30))

    return {
        "signed-out": [("login", "/accounts/login/")],
        "lena": [
            ("labeler-home", "/"),
            ("queue", "/p/default/label/"),
            ("labeling-in-progress", f"/p/default/label/{in_progress.pk}/"),
            ("labeling-finished", f"/p/default/label/{finished.pk}/"),
            ("guidelines", "/p/default/label/guidelines/"),
            ("api-tokens", "/account/tokens/"),
            ("403", "/p/default/research/"),
            ("404", "/no-such-page/"),
        ],
        "lea": [
            ("lead-cockpit", "/"),
            ("lead-home", "/p/default/label/lead/"),
            ("batch-dashboard", f"/p/default/label/lead/batches/{batch.pk}/"),
            ("batch-new", "/p/default/label/lead/batches/new/"),
            ("batch-edit", f"/p/default/label/lead/batches/{batch.pk}/edit/"),
            ("labelers", "/p/default/label/lead/labelers/"),
            ("labeler-detail", f"/p/default/label/lead/labelers/{lena.pk}/"),
            ("adjudication-queue", "/p/default/label/lead/adjudication/"),
            ("adjudicate", f"/p/default/label/lead/adjudication/{disputed.pk}/"),
            ("items", f"/p/default/label/lead/batches/{batch.pk}/items/"),
            ("item", f"/p/default/label/lead/items/{disputed.pk}/"),
            ("guidelines-edit", "/p/default/label/guidelines/edit/"),
            ("labeling-alternatives", f"/p/default/label/{step_by_step.pk}/"),
        ],
        "rhea": [
            ("researcher-home", "/"),
            ("research", "/p/default/research/"),
            ("snapshots", "/p/default/research/snapshots/"),
            ("runs", "/p/default/modeling/runs/"),
            ("run-detail", f"/p/default/modeling/runs/{run.pk}/"),
            ("models", "/p/default/modeling/models/"),
            ("generations", "/p/default/generations/"),
            ("generation-detail", f"/p/default/generations/{generation.generation}/"),
            ("sampling", "/p/default/pool/sampling/"),
            ("model-review", f"/p/default/modeling/review/?batch={batch.pk}"),
        ],
    }


USERS = {"signed-out": "signed-out", "labeler": "lena", "lead": "lea", "researcher": "rhea"}


@pytest.fixture
def screenshot_dir(tmp_path) -> Path:
    folder = Path(os.environ.get("STEPWISE_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_as(browser, live_server, username: str, **context_options):
    """A browser context signed in as `username` (or not), and its page."""
    context = browser.new_context(bypass_csp=True, **context_options)  # axe runs as a script
    context.set_default_timeout(60_000)
    page = context.new_page()
    if username != "signed-out":
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", f"{username}-pw")
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return context, page


def settle(page, path: str) -> None:
    """Open a page and wait until its scripts drew it: math typeset, charts drawn."""
    response = page.goto(path)
    assert response is not None
    page.wait_for_load_state("load")
    if page.locator(".math").count():
        page.wait_for_selector(".katex", state="attached")
    for canvas in page.locator("canvas[id^=chart-]").all():
        canvas_id = canvas.get_attribute("id")
        page.wait_for_function(f"() => window.Chart && Chart.getChart('{canvas_id}')")


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        targets = ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        lines.append(f"  {v['id']} ({v['impact']}): {v['help']} -> {targets}\n    {v['helpUrl']}")
    return "\n".join(lines)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("role", ROLES)
def test_every_page_passes_axe_in_both_themes(browser, live_server, screenshot_dir, role, theme):
    pages = build_pages()[USERS[role]]
    context, page = open_as(
        browser,
        live_server,
        USERS[role],
        color_scheme=theme,
        viewport={"width": 1280, "height": 900},
    )
    axe, failures = Axe(), []
    try:
        for name, path in pages:
            settle(page, f"{live_server.url}{path}")
            # The theme followed the system (emulated): the page is what a user of it sees.
            assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (
                theme == "dark"
            )
            page.screenshot(
                path=str(screenshot_dir / f"{role}-{name}-{theme}-1280.png"), full_page=True
            )
            violations = axe.run(page, options=AXE_OPTIONS).response["violations"]
            if violations:
                failures.append(f"{name} ({path}), {theme}:\n{describe(violations)}")
    finally:
        context.close()
    assert not failures, "axe found WCAG 2 A/AA violations:\n" + "\n".join(failures)


@pytest.mark.parametrize("role", ROLES)
def test_every_page_fits_a_tablet_without_sideways_scrolling(
    browser, live_server, screenshot_dir, role
):
    pages = build_pages()[USERS[role]]
    context, page = open_as(
        browser, live_server, USERS[role], viewport={"width": 768, "height": 1024}
    )
    too_wide = []
    try:
        for name, path in pages:
            settle(page, f"{live_server.url}{path}")
            width = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
            if width[0] > width[1]:
                too_wide.append(f"{name} ({path}): {width[0]} px wide in a {width[1]} px window")
            if name == "labeling-in-progress":  # the rating buttons are on screen, none cut off
                for button in page.locator(".rate-buttons .rate").all():
                    box = button.bounding_box()
                    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width[1]
            page.screenshot(path=str(screenshot_dir / f"{role}-{name}-768.png"), full_page=True)
    finally:
        context.close()
    assert not too_wide, "pages wider than the tablet:\n" + "\n".join(too_wide)
