"""The researchers' page in a real browser: it renders, polls progress and creates snapshots."""

import os

import pytest

from labeling.models import Snapshot
from tests.helpers.users import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Playwright's sync API keeps an event loop running in the test thread for as long as the
# session's browser lives; the ORM calls in tests and database teardown are sync code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def test_research_page_in_chromium(
    live_server, page, artifacts_dir, shared_data, settings, tmp_path
):
    from labeling.services import snapshots
    from labeling.services.exporting import ExportFilters, StepwiseOptions
    from labeling.services.importing import import_prm800k

    settings.MEDIA_ROOT = tmp_path / "media"
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    make_user("rhea", "researcher")
    done = snapshots.snapshot_create(
        user=None, fmt="prm800k", filters=ExportFilters(), options=StepwiseOptions(), enqueue=False
    )
    snapshots.snapshot_run(snapshot_id=done.pk)
    running = Snapshot.objects.create(
        format="stepwise_parquet", status="running", total=100, processed=40
    )

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "rhea")
    page.fill("input[name=password]", "rhea-pw")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/p/default/research/")
    assert page.locator("nav a", has_text="Research").count() == 1
    assert page.locator(f"#snapshot-{done.pk} a", has_text="Download").count() == 1
    bar = page.locator(f"#snapshot-{running.pk} progress")
    assert bar.get_attribute("value") == "40"
    page.screenshot(path=str(artifacts_dir / "research-page.png"), full_page=True)

    # htmx polling picks up progress without a reload
    Snapshot.objects.filter(pk=running.pk).update(processed=90)
    page.wait_for_function(
        f"document.querySelector('#snapshot-{running.pk} progress')?.getAttribute('value') === '90'"
    )

    # Download now posts the form: the CSRF token never lands in a URL
    sent = []
    page.on("request", lambda r: sent.append((r.method, r.url)) if "/export/" in r.url else None)
    with page.expect_download() as download:
        page.click("#download-now")
    assert [method for method, _ in sent] == ["POST"]
    assert all("csrfmiddlewaretoken" not in url for _, url in sent)
    assert "csrfmiddlewaretoken" not in page.url
    name = download.value.suggested_filename
    assert name.startswith("stepwise-prm800k-") and name.endswith(".jsonl")
    assert (
        download.value.path().read_bytes()
        == (shared_data / "prm800k" / "samples.jsonl").read_bytes()
    )


def test_api_docs_render_offline_in_chromium(live_server, page, artifacts_dir):
    make_user("rhea", "researcher")
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "rhea")
    page.fill("input[name=password]", "rhea-pw")
    page.click("button[type=submit]")
    external = []
    page.on(
        "request",
        lambda r: external.append(r.url) if not r.url.startswith(live_server.url) else None,
    )
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".opblock-summary-path")
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any(
        "/p/{project}/api/snapshots/{id}/download/" in p.replace("\u200b", "") for p in paths
    )
    assert external == []  # everything from our own server
    page.screenshot(path=str(artifacts_dir / "api-docs.png"))
