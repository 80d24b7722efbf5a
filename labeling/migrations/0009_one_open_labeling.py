"""One open labeling per labeler, held by the database.

Before the constraint, concurrent claims from several tabs of one labeler could each start a
labeling. The data step leaves each labeler's newest open labeling in progress and expires the
others exactly as `queue.expire_stale_leases` does (status `expired`, the solution's
`active_count` given back): no row is deleted, their rated steps stay, and the labeler gets the
latest of them back (their next claim takes it up again) once the open one is done, if it still
has room.
"""

from django.db import migrations, models
from django.db.models import Count, F


def expire_extra_open_labelings(apps, schema_editor):
    Labeling = apps.get_model("labeling", "Labeling")
    Solution = apps.get_model("labeling", "Solution")
    open_ = Labeling.objects.filter(status="in_progress")
    crowded = (
        open_.values("labeler_id").annotate(n=Count("id")).filter(n__gt=1).values("labeler_id")
    )
    for labeler_id in crowded.values_list("labeler_id", flat=True):
        rows = open_.filter(labeler_id=labeler_id).order_by("-started_at", "-id")
        for labeling_id, solution_id in list(rows.values_list("id", "solution_id"))[1:]:
            Labeling.objects.filter(pk=labeling_id).update(status="expired")
            Solution.objects.filter(pk=solution_id, active_count__gt=0).update(
                active_count=F("active_count") - 1
            )


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0008_alternatives_protocol"),
    ]

    operations = [
        migrations.RunPython(expire_extra_open_labelings, migrations.RunPython.noop),
        # Implied by the new constraint (one open labeling per labeler, of any solution).
        migrations.RemoveConstraint(
            model_name="labeling",
            name="one_open_labeling_per_labeler_and_solution",
        ),
        migrations.AddConstraint(
            model_name="labeling",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "in_progress")),
                fields=("labeler",),
                name="one_open_labeling_per_labeler",
            ),
        ),
    ]
