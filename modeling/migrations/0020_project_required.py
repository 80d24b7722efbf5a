"""The project becomes required; the active model, the current evaluation set, an evaluation
set's version and a generation's number become one per project."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Q

import labeling.models.projects

OWNED = (
    "trainingrun",
    "modelversion",
    "evaluationset",
    "samplingrun",
    "generationrun",
    "bestofncomparison",
)


class Migration(migrations.Migration):
    dependencies = [("modeling", "0019_default_project")]

    operations = [
        *(
            migrations.AlterField(
                model_name=name,
                name="project",
                field=models.ForeignKey(
                    default=labeling.models.projects.default_project_id,
                    on_delete=django.db.models.deletion.PROTECT,
                    related_name="+",
                    to="labeling.project",
                ),
            )
            for name in OWNED
        ),
        migrations.RemoveConstraint(model_name="modelversion", name="one_active_model"),
        migrations.AddConstraint(
            model_name="modelversion",
            constraint=models.UniqueConstraint(
                condition=Q(is_active=True),
                fields=("project",),
                name="one_active_model_per_project",
            ),
        ),
        migrations.RemoveConstraint(model_name="evaluationset", name="one_current_evaluation_set"),
        migrations.AddConstraint(
            model_name="evaluationset",
            constraint=models.UniqueConstraint(
                condition=Q(is_current=True),
                fields=("project",),
                name="one_current_evaluation_set_per_project",
            ),
        ),
        migrations.AlterField(
            model_name="evaluationset", name="version", field=models.PositiveIntegerField()
        ),
        migrations.AddConstraint(
            model_name="evaluationset",
            constraint=models.UniqueConstraint(
                fields=("project", "version"), name="evaluation_set_version_per_project"
            ),
        ),
        migrations.AlterField(
            model_name="generationrun",
            name="generation",
            field=models.IntegerField(help_text="The generation number this run prepares."),
        ),
        migrations.AddConstraint(
            model_name="generationrun",
            constraint=models.UniqueConstraint(
                fields=("project", "generation"), name="generation_per_project"
            ),
        ),
    ]
