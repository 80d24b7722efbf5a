"""End to end in Debian's chromium: a suggest-mode solution rated by keyboard, some of the judge's
labels accepted (Y) and others overridden by a rating key; then the stored provenance and the
stepwise export."""

import io
import json

import pytest

from labeling.models import Batch, Labeling
from labeling.services.exporting import (
    ExportFilters,
    StepwiseOptions,
    select_labelings,
    write_export,
)
from tests.factories import make_batch, make_prelabel, make_solution
from tests.helpers.users import make_user
from tests.test_browser_labeling import keys_ready, open_first_solution, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS = [
    "Let $x = 3$.",
    "Then $x^2 = 9$.",
    "So $x^3 = 18$.",
    "# Answer\n\n18",
]


def test_a_labeler_accepts_and_overrides_suggestions_by_keyboard(page, live_server, artifacts_dir):
    labeler = make_user("sam", "labeler")
    batch = make_batch(prelabel_mode=Batch.PrelabelMode.SUGGEST, prelabel_judge="prm")
    prelabel = make_prelabel(
        make_solution(batch, steps=STEPS),
        labels=[1, -1, -1, None],
        scores=[0.93, 0.55, 0.88, None],
        judge="prm: v7 (run 4)",
    )
    sign_in(page, live_server, "sam")
    open_first_solution(page)
    suggestion = page.locator("#suggestion")
    assert "prm: v7 (run 4)" in suggestion.inner_text() and "93%" in suggestion.inner_text()
    page.keyboard.press("?")  # the key help names the accept key
    assert "accept the judge" in page.inner_text("#key-help")
    page.keyboard.press("Escape")
    keys_ready(page)

    page.keyboard.press("y")  # step 1: accept the judge's +1
    page.wait_for_selector('.step.rated[data-step="0"]')
    page.wait_for_selector('#suggestion[data-suggestion-label="-1"]')
    page.keyboard.press("1")  # step 2: the judge says −1; the labeler overrides with +1
    page.wait_for_selector('.step.rated[data-step="1"]')
    page.screenshot(path=str(artifacts_dir / "suggest-step-3.png"), full_page=True)
    page.keyboard.press("y")  # step 3: accept the judge's −1, which ends the solution
    page.wait_for_selector("#labeling .done")
    assert "found an error" in page.inner_text("#labeling .done")

    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.status == "completed" and labeling.finish_reason == "found_error"
    stored = [
        (
            s.index,
            s.completions.get().rating,
            s.suggestion_shown,
            s.suggestion_judge,
            s.suggestion_label,
            s.suggestion_score,
            s.suggestion_accepted,
        )
        for s in labeling.step_labels.order_by("index")
    ]
    assert stored == [
        (0, 1, True, "prm: v7 (run 4)", 1, 0.93, True),
        (1, 1, True, "prm: v7 (run 4)", -1, 0.55, False),
        (2, -1, True, "prm: v7 (run 4)", -1, 0.88, True),
    ]
    out = io.BytesIO()
    write_export(
        out, "stepwise_jsonl", select_labelings(ExportFilters()), options=StepwiseOptions()
    )
    (row,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [
        (p["step"], p["suggestion_label"], p["suggestion_accepted"]) for p in row["provenance"]
    ] == [
        (0, 1, True),
        (1, -1, False),
        (2, -1, True),
    ]
    assert prelabel.pk  # the rows name the judge, not the client's word
