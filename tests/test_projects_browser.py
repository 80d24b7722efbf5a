"""In Debian's chromium: lead2, the lead of the second project only, signs in, lands in his
project, works there (a batch made from the lead's form, its dashboard, his people page) and
never sees the first project: not in the top bar, not on a page, and its links answer 404."""

import pytest

from labeling.models import Batch, Project
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_lead2_works_in_the_second_project_and_never_sees_the_first(page, live_server):
    first_batch = make_batch(name="Secret phase 1 batch")
    make_solution(first_batch)
    make_user("lead", "lead")  # the first project's lead
    second = Project.objects.create(name="MATH step by step", slug="math-step-by-step")
    make_user("lead2", "lead", project=second)
    make_user("stella", "labeler", project=second)

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "lead2")
    page.fill("input[name=password]", "lead2-pw")
    page.click("button[type=submit]")
    # One project: straight to its home, its name in the top bar, no switcher.
    page.wait_for_url(f"{live_server.url}/p/math-step-by-step/")
    assert page.inner_text("#project-current") == "MATH step by step"
    assert page.locator(".project-switcher").count() == 0

    page.click("nav >> text=Lead")
    page.wait_for_url(f"{live_server.url}/p/math-step-by-step/label/lead/")
    page.goto(f"{live_server.url}/p/math-step-by-step/label/lead/batches/new/")
    page.fill("input[name=name]", "Step by step, round 1")
    page.click("text=Create batch")
    page.wait_for_url(f"{live_server.url}/p/math-step-by-step/label/lead/batches/*/")
    made = Batch.objects.get(name="Step by step, round 1")
    assert made.project == second and made.created_by.username == "lead2"

    page.goto(f"{live_server.url}/p/math-step-by-step/label/lead/labelers/")
    members = page.locator("#members tbody tr td:first-child").all_inner_texts()
    assert sorted(members) == ["lead2", "stella"]  # not the first project's lead

    for path in ("/p/math-step-by-step/label/lead/", "/p/math-step-by-step/label/lead/labelers/"):
        page.goto(f"{live_server.url}{path}")
        html = page.content()
        assert "Secret phase 1 batch" not in html and "/p/default/" not in html, path
    # The first project's links, and its batch under his own project's link, do not exist.
    for path in (
        "/p/default/",
        "/p/default/label/lead/",
        f"/p/default/label/lead/batches/{first_batch.pk}/",
        f"/p/math-step-by-step/label/lead/batches/{first_batch.pk}/",
    ):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 404, path
        assert "Secret phase 1 batch" not in page.content()
