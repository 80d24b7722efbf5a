"""A pre-label run's project: its batch's; the Default project's for a pool run (made before
projects, every pool was the Default project's)."""

from django.db import migrations


def into_projects(apps, schema_editor):
    Project = apps.get_model("labeling", "Project")
    PreLabelRun = apps.get_model("modeling", "PreLabelRun")
    Batch = apps.get_model("labeling", "Batch")
    if not PreLabelRun.objects.exists():
        return
    default, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    PreLabelRun.objects.filter(batch__isnull=True).update(project=default)
    for project_id in Batch.objects.values_list("project_id", flat=True).distinct():
        PreLabelRun.objects.filter(batch__project_id=project_id).update(project_id=project_id)


class Migration(migrations.Migration):
    dependencies = [("modeling", "0021_prelabel_run_project")]

    operations = [migrations.RunPython(into_projects, migrations.RunPython.noop)]
