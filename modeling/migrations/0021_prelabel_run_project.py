"""A pre-label run's own project (a pool run has no batch); filled by 0022, required by 0023
(three migrations: PostgreSQL refuses to alter a table with the fill's pending triggers)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0022_project_required"),
        ("modeling", "0020_project_required"),
    ]

    operations = [
        migrations.AddField(
            model_name="prelabelrun",
            name="project",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="labeling.project",
            ),
        ),
    ]
