"""Projects: one labeling campaign each, with its own people (a role per member), batches,
solutions, guidelines, snapshots and models. The admin (the `admin` group, or a superuser) is
global and holds every role in every project."""

from django.conf import settings
from django.db import models
from django.utils import timezone

DEFAULT_SLUG = "default"


class Project(models.Model):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=64, unique=True, help_text="The links' /p/<slug>/ part.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


def default_project_id() -> int:
    """The "Default" project (made on first use): where a row made without a project goes, as
    every row did before projects (the upgrade's migration puts them all there)."""
    project, _ = Project.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})
    return project.pk


def project_pk(project: Project | int | None) -> int:
    """The id of `project` (a Project or its id); the Default project's where None is named
    (callers from before projects: commands, tests)."""
    if project is None:
        return default_project_id()
    return project if isinstance(project, int) else project.pk


def in_project(project_id: int | None, field: str = "project") -> dict[str, object]:
    """The filter keeping rows of the project `project_id` (through `field`); of the Default
    project where None is named (callers from before projects: commands, tests)."""
    if project_id is None:
        return {f"{field}__slug": DEFAULT_SLUG}
    return {f"{field}_id": project_id}


class Membership(models.Model):
    """A user's role in one project; a user may hold several roles in one project, and roles in
    several projects."""

    class Role(models.TextChoices):
        LABELER = "labeler", "labeler"
        LEAD = "lead", "lead"
        RESEARCHER = "researcher", "researcher"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "user", "role"], name="one_membership_per_role"
            ),
        ]
        indexes = [models.Index(fields=["user", "project"], name="membership_user_idx")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} in {self.project}"
