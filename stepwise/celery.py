"""The Celery app. Queues: `default` for light work, `gpu` for training and scoring."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

app = Celery("stepwise")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
