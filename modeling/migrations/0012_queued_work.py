"""Training, generation and sampling runs are queued work (stepwise.queued.QueuedWork): every
one counts its attempts, a generation's heartbeat is its row's, and a failure's reason is cut
to one length (10,000 characters).

A generation running at the upgrade takes its heartbeat from its step's last report (or
start), where the step kept it until now.
"""

from django.db import migrations, models
from django.utils.dateparse import parse_datetime


def running_generations_keep_their_heartbeat(apps, schema_editor):
    GenerationRun = apps.get_model("modeling", "GenerationRun")
    for run in GenerationRun.objects.filter(status="running"):
        state = (run.steps or {}).get(run.current_step) or {}
        seen = state.get("heartbeat") or state.get("started_at")
        if seen:
            run.heartbeat_at = parse_datetime(seen)
            run.save(update_fields=["heartbeat_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("modeling", "0011_trainingrun_phase_progress"),
    ]

    operations = [
        migrations.AddField(
            model_name="generationrun",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="samplingrun",
            name="attempts",
            field=models.PositiveSmallIntegerField(
                default=0, help_text="How many times a worker took it."
            ),
        ),
        migrations.AlterField(
            model_name="generationrun",
            name="attempts",
            field=models.PositiveSmallIntegerField(
                default=0, help_text="How many times a worker took it."
            ),
        ),
        migrations.AlterField(
            model_name="generationrun",
            name="error",
            field=models.TextField(blank=True, max_length=10000),
        ),
        migrations.AlterField(
            model_name="samplingrun",
            name="error",
            field=models.TextField(blank=True, max_length=10000),
        ),
        migrations.AlterField(
            model_name="trainingrun",
            name="attempts",
            field=models.PositiveSmallIntegerField(
                default=0, help_text="How many times a worker took it."
            ),
        ),
        migrations.AlterField(
            model_name="trainingrun",
            name="error",
            field=models.TextField(blank=True, max_length=10000),
        ),
        migrations.RunPython(running_generations_keep_their_heartbeat, migrations.RunPython.noop),
    ]
