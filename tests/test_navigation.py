"""The nav bar shows each role every page it may open, from every page: the links it needs and
no link it would be refused; the other pages are one click from the home page or a nav page."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, reverse

from labeling.urls import labeler_patterns, research_patterns
from modeling.urls import loop_patterns, run_patterns
from tests.helpers.users import make_user

pytestmark = pytest.mark.django_db

LABEL, GUIDELINES = "/p/default/label/", "/p/default/label/guidelines/"
LEAD_PAGES = {"/p/default/label/lead/", "/p/default/label/lead/adjudication/"}
TRAINING_AND_LOOP = {"/p/default/modeling/runs/", "/p/default/generations/"}
NAV = {
    "labeler": {LABEL, GUIDELINES},
    "lead": LEAD_PAGES | TRAINING_AND_LOOP | {GUIDELINES},
    "researcher": {"/p/default/research/", GUIDELINES} | TRAINING_AND_LOOP,
    "admin": {LABEL, GUIDELINES, "/p/default/research/", "/admin/"}
    | LEAD_PAGES
    | TRAINING_AND_LOOP,
}
# Fragments a page fetches by htmx, not pages: the research page's own table (polled), the
# sampling form's time estimate (as the form changes).
NOT_PAGES = {"research:snapshots", "modeling_loop:sampling_estimate"}


def sign_in(client, role: str):
    user = make_user(f"{role}-persona", role)
    if role == "admin":  # the demo's admin: the admin role, staff and superuser
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(user)
    return user


def nav_links(html: str) -> set[str]:
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S)
    assert nav, "no nav on the page"
    return set(re.findall(r'href="([^"]+)"', nav.group(1)))


def page_links(html: str) -> set[str]:
    return {link for link in re.findall(r'href="(/[^"]*)"', html) if not link.startswith("/static")}


def pages_without_arguments() -> list[str]:
    """Every route of the pages (not the API) that takes no argument, as a URL."""
    urls = []
    for namespace, patterns in (
        ("labeling", labeler_patterns),
        ("research", research_patterns),
        ("modeling_runs", run_patterns),
        ("modeling_loop", loop_patterns),
    ):
        for pattern in patterns:
            if isinstance(pattern, URLPattern) and not pattern.pattern.converters:
                name = f"{namespace}:{pattern.name}"
                if name not in NOT_PAGES:
                    urls.append(reverse(name))
    return urls


@pytest.mark.parametrize("role", sorted(NAV))
def test_the_nav_shows_each_role_its_pages_and_each_opens(client, role):
    sign_in(client, role)
    home = client.get(reverse("home"), follow=True)
    assert home.status_code == 200
    links = nav_links(home.content.decode())
    assert links == NAV[role]
    for link in links:
        page = client.get(link)
        assert page.status_code == 200, f"{link} answered {page.status_code} to a {role}"
        if link != "/admin/":  # Django's admin has its own header
            assert nav_links(page.content.decode()) == NAV[role], f"{link} has another nav"


@pytest.mark.parametrize("role", sorted(NAV))
def test_every_page_a_role_may_open_is_one_click_from_home_or_the_nav(client, role):
    sign_in(client, role)
    home = client.get(reverse("home"), follow=True).content.decode()
    nav = nav_links(home)
    reachable = nav | page_links(home)
    for link in nav - {"/admin/"}:
        reachable |= page_links(client.get(link).content.decode())
    may_open = [url for url in pages_without_arguments() if client.get(url).status_code == 200]
    assert may_open  # the check below checks something
    assert sorted(set(may_open) - reachable) == []
