from django.conf import settings


def test_every_beat_entry_names_a_registered_task():
    from stepwise.celery import app

    app.loader.import_default_modules()
    entries = settings.CELERY_BEAT_SCHEDULE
    expected = {"expire-leases", "fail-stale-training-runs", "check-generation-progress"}
    assert expected <= set(entries)
    assert {entry["task"] for entry in entries.values()} <= set(app.tasks)
