"""Every owned row has its project (0020): the column becomes required, and what was unique in
the whole database becomes unique per project (a batch's name, a solution's content, a
guidelines version)."""

import django.db.models.deletion
from django.db import migrations, models

import labeling.models.projects


def _project_fk(related_name: str = "+") -> models.ForeignKey:
    return models.ForeignKey(
        default=labeling.models.projects.default_project_id,
        on_delete=django.db.models.deletion.PROTECT,
        related_name=related_name,
        to="labeling.project",
    )


class Migration(migrations.Migration):
    dependencies = [("labeling", "0021_default_project")]

    operations = [
        migrations.AlterField(model_name="batch", name="project", field=_project_fk("batches")),
        migrations.AlterField(model_name="solution", name="project", field=_project_fk()),
        migrations.AlterField(model_name="guidelines", name="project", field=_project_fk()),
        migrations.AlterField(model_name="snapshot", name="project", field=_project_fk()),
        migrations.AlterField(
            model_name="batch", name="name", field=models.CharField(max_length=200)
        ),
        migrations.AlterField(
            model_name="solution", name="content_sha256", field=models.CharField(max_length=64)
        ),
        migrations.AlterField(
            model_name="guidelines", name="version", field=models.PositiveIntegerField()
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.UniqueConstraint(
                fields=("project", "name"), name="batch_name_per_project"
            ),
        ),
        migrations.AddConstraint(
            model_name="solution",
            constraint=models.UniqueConstraint(
                fields=("project", "content_sha256"), name="solution_content_per_project"
            ),
        ),
        migrations.AddConstraint(
            model_name="guidelines",
            constraint=models.UniqueConstraint(
                fields=("project", "version"), name="guidelines_version_per_project"
            ),
        ),
    ]
