"""Everything that existed before projects moves into the project "Default" (slug `default`),
and every member of the labeler, lead and researcher groups holds that role there. The groups
stay: the admin group is the global admin, the others say nothing more once every role is a
membership."""

from django.db import migrations

ROLES = ("labeler", "lead", "researcher")
OWNED = ("Batch", "Solution", "Guidelines", "Snapshot")


def into_default(apps, schema_editor):
    Project = apps.get_model("labeling", "Project")
    Membership = apps.get_model("labeling", "Membership")
    Group = apps.get_model("auth", "Group")
    project, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    for name in OWNED:
        apps.get_model("labeling", name).objects.filter(project__isnull=True).update(
            project=project
        )
    for group in Group.objects.filter(name__in=ROLES):
        Membership.objects.bulk_create(
            [
                Membership(project=project, user_id=user_id, role=group.name)
                for user_id in group.user_set.values_list("id", flat=True)
            ],
            ignore_conflicts=True,
        )


def out_of_default(apps, schema_editor):
    """Back to before projects: the project columns are dropped by 0019's reverse."""
    apps.get_model("labeling", "Membership").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("labeling", "0020_projects")]

    operations = [migrations.RunPython(into_default, out_of_default)]
