"""A project on what a project owns in modeling: training runs, model versions, evaluation sets,
sampling and generation runs, best-of-N comparisons (pre-label runs reach theirs through their
batch, pool entries and exports through their solution and version). Nullable here, filled
with the "Default" project (labeling 0020) by 0017, required by 0018."""

import django.db.models.deletion
from django.db import migrations, models

OWNED = (
    "trainingrun",
    "modelversion",
    "evaluationset",
    "samplingrun",
    "generationrun",
    "bestofncomparison",
)


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0022_project_required"),
        ("modeling", "0017_routing"),
    ]

    operations = [
        migrations.AddField(
            model_name=name,
            name="project",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="labeling.project",
            ),
        )
        for name in OWNED
    ]
