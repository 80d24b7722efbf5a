"""Projects and memberships; a nullable project on what a project owns (filled by 0020, made
required by 0021: three steps, as PostgreSQL cannot alter a table with rows updated in the
same transaction)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def _project_fk(related_name: str = "+") -> models.ForeignKey:
    return models.ForeignKey(
        null=True,
        on_delete=django.db.models.deletion.PROTECT,
        related_name=related_name,
        to="labeling.project",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0019_machine_labels"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Project",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                (
                    "slug",
                    models.SlugField(
                        help_text="The links' /p/<slug>/ part.", max_length=64, unique=True
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("labeler", "labeler"),
                            ("lead", "lead"),
                            ("researcher", "researcher"),
                        ],
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="labeling.project",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "user", "role"), name="one_membership_per_role"
                    )
                ],
                "indexes": [models.Index(fields=["user", "project"], name="membership_user_idx")],
            },
        ),
        migrations.AddField(model_name="batch", name="project", field=_project_fk("batches")),
        migrations.AddField(model_name="solution", name="project", field=_project_fk()),
        migrations.AddField(model_name="guidelines", name="project", field=_project_fk()),
        migrations.AddField(model_name="snapshot", name="project", field=_project_fk()),
    ]
