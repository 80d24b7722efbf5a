from django.apps import AppConfig


class ModelingConfig(AppConfig):
    name = "modeling"
    verbose_name = "Modeling"

    def ready(self) -> None:
        # Celery autodiscovers `tasks.py` only; the loop's tasks live beside it.
        from modeling import tasks_loop  # noqa: F401
