"""The project's settings, served with benchmarks/floor_urls.py as the URLconf: the project's
pages plus the floor view. benchmarks/floor.py starts gunicorn with
DJANGO_SETTINGS_MODULE=benchmarks.floor_settings; nothing else uses it."""

from stepwise.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.floor_urls"
