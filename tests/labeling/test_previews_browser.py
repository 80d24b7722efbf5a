"""Previews of problem text in lists keep every formula whole: KaTeX renders their math, and no
half formula shows up as source or as a KaTeX error."""

import os

import pytest
from django.urls import reverse

from labeling.services.rating import finish_labeling
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# A long fraction spans characters 30 to 100: a plain cut at 60 or 90 would fall inside it.
PROBLEM = (
    "If $x = \\frac{1}{2}$, what is "
    "$\\frac{x^{2} + 3x + 5}{x^{3} - 7x + 11} + \\frac{123456789}{987654321}$"
    " when $x$ takes that value?"
)


def test_previews_in_the_queue_and_on_the_lead_pages_render_their_math_whole(
    page, live_server, artifacts_dir
):
    fraction = PROBLEM.index("$\\frac{x")
    assert fraction < 60 and PROBLEM.index("$ when") > 90  # both cuts fall in the fraction
    lead = make_user("lea", "lead", "labeler")
    batch = make_batch(gold_rate=0)
    problem = make_problem(PROBLEM)
    for _ in range(2):
        make_solution(batch, problem=problem)
    finished = next_labeling(lead)
    finish_labeling(labeling_id=finished.pk, user=lead, reason="give_up")
    next_labeling(lead)  # a second one, in progress

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "lea")
    page.fill("input[name=password]", "lea-pw")
    page.click("button[type=submit]")
    page.wait_for_load_state()

    pages = [
        (reverse("labeling:queue"), 1),  # "Your work": finished labelings, cut at 90
        (reverse("labeling:labeler_detail", args=[lead.pk]), 2),  # recent labelings, cut at 60
    ]
    for path, count in pages:
        page.goto(f"{live_server.url}{path}")
        previews = page.locator('a[title^="If $x"]')
        previews.first.locator(".katex").first.wait_for()  # KaTeX ran on the page
        assert previews.count() == count, path
        for i in range(count):
            preview = previews.nth(i)
            assert preview.get_attribute("title") == PROBLEM  # the full text, on hover
            assert preview.locator(".katex").count() == 1  # x = 1/2, rendered
            shown = preview.locator(".katex-mathml annotation").all_text_contents()
            assert shown == ["x = \\frac{1}{2}"]
            visible = preview.evaluate(
                "a => { const c = a.cloneNode(true);"
                " c.querySelectorAll('.katex').forEach(k => k.remove()); return c.textContent; }"
            )
            assert visible == "If , what is…"  # no source of a cut formula around the math
        assert page.locator(".katex-error").count() == 0, path
    page.goto(f"{live_server.url}{reverse('labeling:queue')}")
    page.locator("a[title] .katex").first.wait_for()
    page.screenshot(path=str(artifacts_dir / "math-previews.png"), full_page=True)
