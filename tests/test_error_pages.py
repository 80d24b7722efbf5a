"""403, 404 and 500 answer with pages of the app (its stylesheet, what happened, the way home),
JSON under /api/, and /favicon.ico resolves. Settings' DEBUG is off in tests, as in production.

This module is also the URLconf of its tests (`pytest.mark.urls`): the site's routes plus a view
that fails the way a bug would, so a 500 goes through the real handler without touching the app."""

import os

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import path, reverse

from labeling.models import Batch, Labeling
from stepwise.urls import handler403, handler404, handler500  # noqa: F401 - this URLconf's too
from stepwise.urls import urlpatterns as site_urlpatterns
from stepwise.views import SERVER_ERROR
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling


def failing_view(request):
    raise ZeroDivisionError("a bug in a view")


urlpatterns = [
    path("broken/", failing_view),
    path("api/broken/", failing_view),
    *site_urlpatterns,
]

STYLESHEET = '<link rel="stylesheet" href="/static/css/app.css">'
FAVICON = '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
HOME_LINK = '<a class="button primary" href="/">Back to the start page</a>'


@pytest.fixture
def signed_in(labeler):
    client = Client(raise_request_exception=False)
    client.force_login(labeler)
    return client


def test_a_labeler_on_a_lead_page_is_told_why_and_which_role_it_needs(signed_in):
    response = signed_in.get(reverse("labeling:lead_home"))
    html = response.content.decode()
    assert response.status_code == 403
    assert "<h1>Not allowed</h1>" in html
    assert '<p class="reason">This page is for leads.</p>' in html
    assert 'This page needs the role\n    <span class="chip role">lead</span>.' in html
    assert 'You have <span class="chip">labeler</span>.' in html
    assert HOME_LINK in html and STYLESHEET in html and FAVICON in html
    assert '<a href="/p/default/label/">Label</a>' in html  # the app's own navigation, signed in


def test_a_form_from_an_earlier_session_is_refused_with_a_page_of_the_app(labeler):
    client = Client(enforce_csrf_checks=True)
    client.force_login(labeler)
    response = client.post(reverse("logout"))  # no CSRF token, as from a page of another session
    html = response.content.decode()
    assert response.status_code == 403
    assert "<h1>Not allowed</h1>" in html
    assert "Nothing was saved. Reload the page and send it again." in html
    assert HOME_LINK in html and STYLESHEET in html
    assert "_auth_user_id" in client.session  # the refused logout did nothing

    asked_json = client.post(reverse("logout"), headers={"Accept": "application/json"})
    assert asked_json.status_code == 403
    assert asked_json.json()["detail"].startswith("CSRF failed: CSRF token missing")


def test_a_page_for_several_roles_names_each(signed_in):
    html = signed_in.get("/p/default/modeling/runs/").content.decode()
    assert "Training runs are for leads and researchers." in html
    assert (
        'needs one of the roles\n    <span class="chip role">lead</span> or '
        '<span class="chip role">researcher</span>.'
    ) in html


@pytest.mark.django_db
def test_a_refusal_that_is_not_about_a_role_shows_its_message_only(labeler, labeler2):
    make_solution(make_batch(gold_rate=0))
    theirs = next_labeling(labeler2)
    client = Client(raise_request_exception=False)
    client.force_login(labeler)
    response = client.get(reverse("labeling:labeling", args=[theirs.pk]))
    html = response.content.decode()
    assert response.status_code == 403
    assert '<p class="reason">This labeling is not yours.</p>' in html
    assert "needed-roles" not in html and HOME_LINK in html


def test_an_htmx_request_gets_the_refusal_alone_not_a_page_in_its_target(signed_in):
    response = signed_in.get(reverse("labeling:lead_home"), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 403
    assert html.lstrip().startswith('<section class="card error-page"')
    assert "This page is for leads." in html and "<header" not in html


def test_an_unknown_address_is_a_404_page_with_the_way_home(signed_in):
    response = signed_in.get("/no/such/<page>/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in html
    assert "Nothing is at <code>/no/such/&lt;page&gt;/</code>" in html
    assert HOME_LINK in html and STYLESHEET in html and FAVICON in html


def test_an_unknown_api_address_answers_json_as_drf_does(signed_in):
    response = signed_in.get("/p/default/api/no-such-thing/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}
    # DRF's own answers stay its own: a missing row, a role it refuses.
    missing = signed_in.get("/p/default/api/labelings/999999/")
    assert missing.status_code == 404 and "detail" in missing.json()
    refused = signed_in.get("/p/default/api/problems/")
    assert refused.status_code == 403 and "detail" in refused.json()


@pytest.mark.django_db
def test_a_missing_row_is_the_apps_404_page_even_with_debug_on(settings, lead, researcher):
    """A developer's DEBUG=1: a missing labeling, solution, batch or run is still the
    app's page (the handler's), never Django's technical 404 for developers."""
    settings.DEBUG = True
    labeling_count, batch_count = Labeling.objects.count(), Batch.objects.count()
    lead.groups.add(Group.objects.get(name="labeler"))
    client = Client(raise_request_exception=False)
    client.force_login(lead)
    for address in [
        reverse("labeling:labeling", args=[999999]),
        reverse("labeling:adjudicate", args=[999999]),
        reverse("labeling:batch_dashboard", args=[999999]),
    ]:
        response = client.get(address)
        html = response.content.decode()
        assert response.status_code == 404, address
        assert "<h1>Not found</h1>" in html and f"Nothing is at <code>{address}</code>" in html
        assert HOME_LINK in html and STYLESHEET in html
        assert "technical_404" not in html and "Django tried these URL patterns" not in html
    # htmx: the card alone, for the target; the API: JSON (DRF's own answer).
    fragment = client.get(reverse("labeling:labeling", args=[999999]), HTTP_HX_REQUEST="true")
    assert fragment.status_code == 404
    assert fragment.content.decode().lstrip().startswith('<section class="card error-page"')
    missing = client.get("/p/default/api/labelings/999999/")
    assert missing.status_code == 404 and "detail" in missing.json()
    client.force_login(researcher)
    run = client.get(reverse("modeling_runs:detail", args=[999999]))
    assert run.status_code == 404 and "<h1>Not found</h1>" in run.content.decode()
    # Looking wrote nothing (a labeler record may be made; no labeling, no batch).
    assert (Labeling.objects.count(), Batch.objects.count()) == (labeling_count, batch_count)


@pytest.mark.urls("tests.test_error_pages")
def test_a_failing_view_is_a_500_page_in_the_house_style(signed_in):
    response = signed_in.get("/broken/")
    html = response.content.decode()
    assert response.status_code == 500
    assert "Retry-After" not in response
    assert "<h1>Server error</h1>" in html and SERVER_ERROR in html
    assert HOME_LINK in html and STYLESHEET in html and FAVICON in html
    assert "ZeroDivisionError" not in html and "Traceback" not in html


@pytest.mark.urls("tests.test_error_pages")
def test_a_failing_api_view_is_a_500_in_json(signed_in):
    response = signed_in.get("/api/broken/")
    assert response.status_code == 500
    assert response.json() == {"detail": SERVER_ERROR}


def test_favicon_ico_leads_to_the_svg_that_every_page_links(client, labeler):
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == "/static/favicon.svg"
    icon = client.get(response["Location"])
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(icon.streaming_content)
    client.force_login(labeler)
    assert FAVICON in client.get(reverse("labeling:queue")).content.decode()


CSP_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.test_error_pages")
def test_error_pages_load_under_the_csp_without_a_violation(
    strict_page, live_server, artifacts_dir
):
    page = strict_page
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_user("kim", "labeler")
    console = []
    page.on("console", lambda message: console.append(message.text))
    page.add_init_script(CSP_VIOLATIONS)
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "kim")
    page.fill("input[name=password]", "kim-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/p/default/")

    for address, status, heading in [
        (reverse("labeling:lead_home"), 403, "Not allowed"),
        ("/no/such/page/", 404, "Not found"),
        ("/broken/", 500, "Server error"),
    ]:
        response = page.goto(f"{live_server.url}{address}")
        page.wait_for_load_state("load")
        assert response.status == status, address
        assert page.inner_text("#error-page h1") == heading
        # The stylesheet applied: the card is laid out by app.css, not the browser's defaults.
        assert page.eval_on_selector("#error-page", "e => getComputedStyle(e).maxWidth") == "560px"
        assert page.evaluate("window.__csp") == [], address
        if status == 403:
            page.screenshot(path=str(artifacts_dir / "error-403.png"), full_page=True)
    assert not [text for text in console if "Content Security Policy" in text], console
    # The favicon the pages link loaded (a failed icon would not break the page, so ask).
    icon = page.request.get(f"{live_server.url}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
