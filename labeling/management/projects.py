"""The `--project` option every command that reads or writes a project's data takes.

Named: that project (by slug). Not named: the deployment's only project, as a user with one
project never has to choose; with several, the command stops and lists them rather than
guess (the Default project is no one's implicit choice once there are two).
"""

from __future__ import annotations

import argparse

from django.core.management.base import CommandError

from labeling.models import Project, default_project_id


def add_project_argument(parser: argparse.ArgumentParser, what: str = "The project's") -> None:
    parser.add_argument(
        "--project",
        metavar="SLUG",
        help=f"{what} slug (the links' /p/<slug>/ part); may be left out where there is one "
        "project only.",
    )


def project_from_option(slug: str | None) -> Project:
    if slug:
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"There is no project {slug!r}; the projects: {_slugs()}.")
        return project
    projects = list(Project.objects.order_by("slug")[:2])
    if len(projects) > 1:
        raise CommandError(f"Name the project with --project: one of {_slugs()}.")
    if projects:
        return projects[0]
    return Project.objects.get(pk=default_project_id())  # a new deployment's first use


def _slugs() -> str:
    return ", ".join(Project.objects.order_by("slug").values_list("slug", flat=True)) or "none"
