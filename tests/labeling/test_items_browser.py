"""In chromium, both themes, axe with no WCAG 2 A/AA violation: a lead filters the item browser
and opens an item by keyboard; a labeler writes a note on a −1 from the labeling page, the lead
sees it and replies, the labeler sees the reply, and the stepwise export carries both.
Screenshots go to $STEPWISE_SCREENSHOT_DIR (default /tmp/shots_leads)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe

from labeling.models import Labeling, Note
from labeling.services.exporting import ExportFilters, select_labelings, write_export
from tests.factories import make_problem, make_solution
from tests.labeling.test_items import build_items
from tests.test_accessibility_browser import AXE_OPTIONS, describe, open_as
from tests.test_browser_labeling import focus_reaches, keys_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

THEMES = ["light", "dark"]


@pytest.fixture
def shots() -> Path:
    folder = Path(os.environ.get("STEPWISE_SCREENSHOT_DIR") or "/tmp/shots_leads")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def no_axe_violations(page, where: str) -> None:
    violations = Axe().run(page, options=AXE_OPTIONS).response["violations"]
    assert not violations, f"axe on {where}:\n{describe(violations)}"


def results_show(page, count: int) -> None:
    page.wait_for_function(
        f"document.querySelectorAll('#item-table tr[data-item]').length === {count}"
    )


@pytest.mark.parametrize("theme", THEMES)
def test_lead_filters_the_items_and_opens_one_by_keyboard(browser, live_server, shots, theme):
    items = build_items()
    context, page = open_as(
        browser,
        live_server,
        "lea",
        color_scheme=theme,
        viewport={"width": 1280, "height": 900},
    )
    try:
        # The batch's dashboard links to its items.
        page.goto(f"{live_server.url}/p/default/label/lead/batches/{items.batch.pk}/")
        page.click("text=Browse items")
        page.wait_for_selector("#item-table")
        results_show(page, 7)
        page.wait_for_selector("#item-table .katex", state="attached")
        page.screenshot(path=str(shots / f"items-{theme}.png"), full_page=True)
        no_axe_violations(page, f"the item browser ({theme})")

        page.select_option("#id_state", "needs_adjudication")  # htmx swaps the results
        results_show(page, 1)
        assert "state=needs_adjudication" in page.url  # the filter is in the address
        page.select_option("#id_state", "")
        results_show(page, 7)
        page.keyboard.press("Escape")
        page.keyboard.press("/")  # search by keyboard
        assert page.evaluate("document.activeElement.id") == "id_q"
        page.keyboard.type("triangle")
        results_show(page, 1)
        assert "Triangle" in page.inner_text("#item-table")
        page.select_option("#id_labeler", label="lars")  # with the search still on: one row
        results_show(page, 1)
        page.fill("#id_q", "")
        results_show(page, 3)  # lars's three solutions
        page.screenshot(path=str(shots / f"items-filtered-{theme}.png"), full_page=True)
        no_axe_violations(page, f"the filtered item browser ({theme})")

        page.keyboard.press("Escape")  # out of the filters, onto the first row
        assert page.evaluate("document.activeElement.classList.contains('item-link')")
        page.keyboard.press("j")
        page.keyboard.press("Enter")  # opens the second of lars's solutions: the disputed one
        page.wait_for_url(f"**/label/lead/items/{items.disagree.pk}/")
        page.wait_for_selector("#item-steps .katex", state="attached")
        assert "2 × 21 is 42, not 44" in page.inner_text("#item-steps")
        assert "note" in page.inner_text("#item-history")
        page.screenshot(path=str(shots / f"item-{theme}.png"), full_page=True)
        no_axe_violations(page, f"the item page ({theme})")
    finally:
        context.close()


@pytest.mark.parametrize("theme", THEMES)
def test_labeler_notes_a_wrong_step_the_lead_replies_and_the_export_has_both(
    browser, live_server, shots, theme
):
    items = build_items()
    lena_context, lena = open_as(
        browser, live_server, "lena", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    lea_context, lea = open_as(
        browser, live_server, "lea", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    try:
        # Lena rates the waiting solution by keyboard and stops at a −1 on step 2.
        lena.goto(f"{live_server.url}/p/default/label/")
        lena.click("#start")
        lena.wait_for_selector("#labeling .step.current")
        keys_ready(lena)
        lena.keyboard.press("1")
        lena.wait_for_selector('.step.rated[data-step="0"]')
        lena.keyboard.press("-")
        lena.wait_for_selector("#labeling .done")
        labeling = Labeling.objects.get(
            labeler=items.lena, status="completed", finish_reason="found_error"
        )

        lena.keyboard.press("n")  # the note box, on the step just rated
        focus_reaches(lena, "note-text")
        assert lena.input_value("#note-step") == "2"
        lena.keyboard.type("1 + 1 is 2; the step says 3 <b>twice</b>")
        lena.keyboard.press("Control+Enter")
        lena.wait_for_selector("#notes .note")
        assert "the step says 3 <b>twice</b>" in lena.inner_text("#notes")  # shown as typed
        note = Note.objects.get(author=items.lena)
        assert (note.labeling_id, note.step_index) == (labeling.pk, 1)
        # The rating path is untouched: the panel is the same, and its keys still act.
        assert lena.locator("#labeling .done").count() == 1
        lena.screenshot(path=str(shots / f"labeling-note-{theme}.png"), full_page=True)
        no_axe_violations(lena, f"the labeling page with a note ({theme})")

        # Lea finds it in the adjudication page and the item page, and replies on the item.
        lea.goto(f"{live_server.url}/p/default/label/lead/items/{labeling.solution_id}/")
        assert "the step says 3 <b>twice</b>" in lea.inner_text("#item-steps")
        lea.fill("#reply-step", "2")
        lea.fill("#reply-text", "Right: 1 + 1 = 2. Thanks.")
        lea.click("#reply-form button[type=submit]")
        lea.wait_for_selector("text=Note saved.")
        assert "Right: 1 + 1 = 2. Thanks." in lea.inner_text("#item-steps")
        lea.screenshot(path=str(shots / f"item-reply-{theme}.png"), full_page=True)
        no_axe_violations(lea, f"the item page with a reply ({theme})")

        # Lena's home tells her of the reply and opens it on her labeling, where it is read.
        reply = Note.objects.get(labeling__isnull=True)
        lena.goto(f"{live_server.url}/")
        unread = lena.locator("#unread-replies")
        assert "1 unread reply from a lead to your notes" in unread.inner_text()
        lena.screenshot(path=str(shots / f"home-unread-reply-{theme}.png"), full_page=True)
        no_axe_violations(lena, f"the labeler's home with an unread reply ({theme})")
        unread.locator("a").click()
        lena.wait_for_selector(f"#notes #note-{reply.pk}.note-lead")
        assert lena.url == f"{live_server.url}/p/default/label/{labeling.pk}/#note-{reply.pk}"
        assert "Right: 1 + 1 = 2. Thanks." in lena.inner_text("#notes")
        lena.goto(f"{live_server.url}/")
        lena.wait_for_selector("#labeler-cockpit")
        assert lena.locator("#unread-replies").count() == 0

        out = io.BytesIO()
        write_export(out, "stepwise_jsonl", select_labelings(ExportFilters()))
        rows = [json.loads(line) for line in out.getvalue().splitlines()]
        mine = [row for row in rows if row["labeling_id"] == labeling.pk]
        assert [(n["role"], n["step"], n["text"]) for n in mine[0]["notes"]] == [
            ("labeler", 1, "1 + 1 is 2; the step says 3 <b>twice</b>"),
            ("lead", 1, "Right: 1 + 1 = 2. Thanks."),
        ]
    finally:
        lena_context.close()
        lea_context.close()


# Each row's problem cell: how wide its content is (what spills out counts), how wide it is,
# where it ends and where the State cell starts.
PROBLEM_CELLS = """() => [...document.querySelectorAll("#item-table tr[data-item]")].map((row) => {
  const cell = row.querySelector(".problem-cell");
  return {item: row.dataset.item, content: cell.scrollWidth, width: cell.clientWidth,
          right: cell.getBoundingClientRect().right,
          stateLeft: row.cells[2].getBoundingClientRect().left};
})"""
LONG_PROBLEM = (
    "A committee of $4$ people is to be chosen from a group of $6$ women and $5$ men. In how "
    "many ways can the committee be chosen if it must contain at least $2$ women and the "
    "oldest man refuses to serve with the youngest woman?"
)


@pytest.mark.parametrize("width", [1280, 768])
def test_the_problem_text_stays_in_its_column_at_desktop_and_tablet_widths(
    browser, live_server, artifacts_dir, width
):
    items = build_items()
    long_problem = make_problem(LONG_PROBLEM)
    for _ in range(2):
        make_solution(items.batch, problem=long_problem)
    context, page = open_as(browser, live_server, "lea", viewport={"width": width, "height": 900})
    try:
        page.goto(f"{live_server.url}/p/default/label/lead/batches/{items.batch.pk}/items/")
        results_show(page, 9)
        page.wait_for_selector("#item-table .katex", state="attached")
        page.screenshot(path=str(artifacts_dir / f"items-{width}.png"), full_page=True)
        rows = page.evaluate(PROBLEM_CELLS)
        # The text stays in its cell (wrapped, clipped), and the cell ends where State starts.
        over = [r for r in rows if r["content"] > r["width"] or r["right"] > r["stateLeft"] + 0.5]
        assert over == [], over
        # Nothing sideways: the table fits its card.
        table, card = (page.locator(s).bounding_box() for s in ("#item-table", "#results"))
        assert table["x"] + table["width"] <= card["x"] + card["width"] + 0.5
    finally:
        context.close()
