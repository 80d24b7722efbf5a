"""A labeler's record (state, screening, gold window and counters, agreement) moves from the one
`Labeler` row per user to a `LabelerRecord` per user and project. Each labeler's values are
copied into a record for the Default project (where every row was before projects) and for each
project where they hold the labeler role today; then the fields leave `Labeler`. Backwards, the
Default project's record goes back onto the labeler."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

FIELDS = (
    "state",
    "state_reason",
    "state_changed_at",
    "state_changed_by_id",
    "screening_score",
    "screening_passed",
    "screening_done_at",
    "gold_window_start",
    "claims_since_gold",
    "gold_labelings",
    "gold_steps",
    "gold_steps_exact",
    "gold_steps_binary",
    "gold_first_error_total",
    "gold_first_error_match",
    "agree_steps_compared",
    "agree_steps_same",
)


def into_records(apps, schema_editor):
    Labeler = apps.get_model("labeling", "Labeler")
    LabelerRecord = apps.get_model("labeling", "LabelerRecord")
    Membership = apps.get_model("labeling", "Membership")
    Project = apps.get_model("labeling", "Project")
    if not Labeler.objects.exists():
        return  # a new database: no project to make
    default, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    labeling_in: dict[int, set[int]] = {}
    for user_id, project_id in Membership.objects.filter(role="labeler").values_list(
        "user_id", "project_id"
    ):
        labeling_in.setdefault(user_id, set()).add(project_id)
    records = []
    for row in Labeler.objects.values("user_id", "created_at", *FIELDS).iterator(chunk_size=2000):
        values = {name: row[name] for name in FIELDS}
        for project_id in sorted({default.pk} | labeling_in.get(row["user_id"], set())):
            records.append(
                LabelerRecord(
                    user_id=row["user_id"],
                    project_id=project_id,
                    created_at=row["created_at"],
                    **values,
                )
            )
        if len(records) >= 2000:
            LabelerRecord.objects.bulk_create(records)
            records = []
    LabelerRecord.objects.bulk_create(records)


def out_of_records(apps, schema_editor):
    Labeler = apps.get_model("labeling", "Labeler")
    LabelerRecord = apps.get_model("labeling", "LabelerRecord")
    for row in LabelerRecord.objects.filter(project__slug="default").values("user_id", *FIELDS):
        user_id = row.pop("user_id")
        Labeler.objects.filter(user_id=user_id).update(**row)


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0023_line_hash_per_project"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="LabelerRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("screening", "screening"),
                            ("active", "active"),
                            ("paused", "paused"),
                            ("rejected", "rejected"),
                        ],
                        default="screening",
                        max_length=16,
                    ),
                ),
                ("state_reason", models.CharField(blank=True, max_length=300)),
                ("state_changed_at", models.DateTimeField(blank=True, null=True)),
                ("screening_score", models.FloatField(blank=True, null=True)),
                ("screening_passed", models.BooleanField(blank=True, null=True)),
                ("screening_done_at", models.DateTimeField(blank=True, null=True)),
                ("gold_window_start", models.DateTimeField(blank=True, null=True)),
                ("claims_since_gold", models.PositiveIntegerField(default=0)),
                ("gold_labelings", models.PositiveIntegerField(default=0)),
                ("gold_steps", models.PositiveIntegerField(default=0)),
                ("gold_steps_exact", models.PositiveIntegerField(default=0)),
                ("gold_steps_binary", models.PositiveIntegerField(default=0)),
                ("gold_first_error_total", models.PositiveIntegerField(default=0)),
                ("gold_first_error_match", models.PositiveIntegerField(default=0)),
                ("agree_steps_compared", models.PositiveIntegerField(default=0)),
                ("agree_steps_same", models.PositiveIntegerField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="labeler_records",
                        to="labeling.project",
                    ),
                ),
                (
                    "state_changed_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="labeler_records",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("user", "project"), name="one_record_per_project"
                    )
                ],
            },
        ),
        migrations.RunPython(into_records, out_of_records),
        *(
            migrations.RemoveField(model_name="labeler", name=name.removesuffix("_id"))
            for name in FIELDS
        ),
    ]
