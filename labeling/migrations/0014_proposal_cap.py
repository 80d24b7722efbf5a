"""Who asked for a candidate set, and whether its task is out: a labeler's sets are capped
(STEPWISE_CANDIDATE_SETS_PER_LABELER).

Requests open at the upgrade were sent when they were requested: their task is out since then
(a lost one is sent again once stale, as before).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import F


def open_requests_were_sent(apps, schema_editor):
    ProposedSteps = apps.get_model("labeling", "ProposedSteps")
    ProposedSteps.objects.filter(status__in=("pending", "running")).update(
        sent_at=F("requested_at")
    )


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0013_proposal_streaming"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="proposedsteps",
            name="requested_by",
            field=models.ForeignKey(
                blank=True,
                help_text="The labeler who asked for it last: it counts against their cap "
                "(STEPWISE_CANDIDATE_SETS_PER_LABELER).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="proposedsteps",
            name="sent_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When its task was sent; cleared when the task is through. Empty on a "
                "pending request: it waits for one of its labeler's tasks to end.",
                null=True,
            ),
        ),
        migrations.RunPython(open_requests_were_sent, migrations.RunPython.noop),
    ]
