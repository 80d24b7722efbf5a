from typing import Any

from django.http import Http404, HttpRequest

from labeling.access import all_projects
from labeling.roles import member_projects, request_project, user_roles


def roles(request: HttpRequest) -> dict[str, Any]:
    """The user's roles in the request's project (in any of theirs outside one), the project,
    and their projects for the switcher (from the cache: no query on a hit)."""
    try:
        project = request_project(request)
        _ = project and project.pk  # an unknown slug's 404 page has no project
    except Http404:
        project = None
    user = request.user
    mine = member_projects(user)
    return {
        "roles": user_roles(user, project),
        "project": project,
        "my_projects": [
            {"slug": slug, "name": name}
            for _, slug, name in (all_projects() if mine is None else mine)
        ],
    }
