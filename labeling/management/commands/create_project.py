"""`.venv/bin/python manage.py create_project "MATH phase 2" --lead lea --lead lou`: a project,
and its leads (who then add the other members on the people pages)."""

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.services.errors import LabelingError
from labeling.services.projects import project_create


class Command(BaseCommand):
    help = "Create a project and name its leads."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The project's name, shown in the navigation.")
        parser.add_argument(
            "--slug", default="", help="Its links' /p/<slug>/ (default: from the name)."
        )
        parser.add_argument(
            "--lead", action="append", default=[], help="A username to lead it (repeatable)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        leads = []
        for username in options["lead"]:
            try:
                leads.append(User.objects.get(username=username))
            except User.DoesNotExist:
                raise CommandError(f"No user “{username}”; nothing was created.") from None
        try:
            project = project_create(name=options["name"], slug=options["slug"], leads=leads)
        except LabelingError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Created project “{project.name}” at /p/{project.slug}/")
