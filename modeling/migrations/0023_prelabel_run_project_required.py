"""Every pre-label run is in a project."""

import django.db.models.deletion
from django.db import migrations, models

import labeling.models.projects


class Migration(migrations.Migration):
    dependencies = [("modeling", "0022_prelabel_run_project_filled")]

    operations = [
        migrations.AlterField(
            model_name="prelabelrun",
            name="project",
            field=models.ForeignKey(
                default=labeling.models.projects.default_project_id,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="labeling.project",
            ),
        ),
    ]
