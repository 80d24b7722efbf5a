"""Every modeling row made before projects belongs to the project "Default"."""

from django.db import migrations

OWNED = (
    "TrainingRun",
    "ModelVersion",
    "EvaluationSet",
    "SamplingRun",
    "GenerationRun",
    "BestOfNComparison",
)


def into_default(apps, schema_editor):
    Project = apps.get_model("labeling", "Project")
    project, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    for name in OWNED:
        apps.get_model("modeling", name).objects.filter(project__isnull=True).update(
            project=project
        )


class Migration(migrations.Migration):
    dependencies = [("modeling", "0018_projects")]

    operations = [migrations.RunPython(into_default, migrations.RunPython.noop)]
