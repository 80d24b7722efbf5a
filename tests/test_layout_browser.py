"""Layout where it is the point, in chromium: a problem whose text opens with display math stays
one line in a table row, the dashboard's doughnut legend fits its card, and the generation and
export forms show their help and their choices whole."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling.models import Labeling
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.layout import CLIPPED_SELECTS
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label
from tests.test_home_browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TITLES = [
    "What is $2 + 2$?",
    "$$\\frac{x^2+1}{x-1} = 3$$ Solve the equation above for every real $x$.",
    "\\[\\sum_{k=1}^{n} k^2 = 285\\] Find $n$.",
]
ROW_HEIGHTS = """() => [...document.querySelectorAll("table.grid tbody tr")]
  .filter((tr) => tr.querySelector("a[title]"))
  .map((tr) => ({height: tr.getBoundingClientRect().height,
                 math: tr.querySelectorAll(".katex").length,
                 display: tr.querySelectorAll(".katex-display").length}))"""
LEGEND_OVERFLOW = """() => {
  const chart = Chart.getChart("chart-finish");
  return chart.legend.legendHitBoxes.filter((box) => box.left < 0 || box.left + box.width > chart.width).length;
}"""


def test_display_math_titles_stay_one_line_and_the_doughnut_legend_fits(page, live_server):
    batch = make_batch("Layout", overlap=1, gold_rate=0)
    for title in TITLES:
        make_solution(batch, problem=make_problem(title), steps=["Think.", "# Answer\n\n42"])
    kim = make_user("kim", "labeler")
    for _ in TITLES:
        claim_and_label(kim, [1, 1])
    assert Labeling.objects.filter(labeler=kim, status="completed").count() == 3
    make_user("lea", "lead")

    sign_in(page, live_server, "kim")
    page.goto(f"{live_server.url}{reverse('labeling:queue')}")
    page.wait_for_selector("table.grid .katex")
    rows = page.evaluate(ROW_HEIGHTS)
    assert len(rows) == 3 and all(row["math"] for row in rows), rows  # every title's math set
    assert not any(row["display"] for row in rows), rows  # inline, never a display block
    heights = [row["height"] for row in rows]
    assert max(heights) - min(heights) <= 4, heights  # as tall as the plain title's row

    page.context.clear_cookies()
    sign_in(page, live_server, "lea")
    page.goto(f"{live_server.url}{reverse('labeling:batch_dashboard', args=[batch.pk])}")
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-finish')")
    assert page.evaluate(LEGEND_OVERFLOW) == 0


@pytest.mark.parametrize("width", [1280, 768])
def test_the_generation_form_gives_its_help_room_and_shows_its_choices_whole(
    page, live_server, artifacts_dir, width
):
    make_user("rae", "researcher")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server, "rae")
    page.goto(f"{live_server.url}{reverse('modeling_loop:generations')}")
    page.wait_for_selector("#start-generation")
    page.screenshot(path=str(artifacts_dir / f"generations-form-{width}.png"), full_page=True)
    helps = page.eval_on_selector_all(
        ".start form small", "els => els.map((e) => e.getBoundingClientRect().width)"
    )
    assert len(helps) == 2 and min(helps) > 250, helps  # a column of words, not of letters
    assert page.evaluate(CLIPPED_SELECTS, ".start form") == []


@pytest.mark.parametrize("width", [1280, 768])
def test_the_export_form_shows_every_choice_whole(page, live_server, artifacts_dir, width):
    for name in ("Demo step by step (alternatives)", "Demo reference labels", "Demo generation 1"):
        make_batch(name)
    make_user("rae", "researcher")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server, "rae")
    page.goto(f"{live_server.url}{reverse('research:index')}")
    page.wait_for_selector("#export-form select[name=labels]")
    page.screenshot(path=str(artifacts_dir / f"export-form-{width}.png"), full_page=True)
    assert page.evaluate(CLIPPED_SELECTS, "#export-form") == []
