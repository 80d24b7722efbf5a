"""A snapshot is queued work (stepwise.queued.QueuedWork): it counts its attempts, and a
failure's reason is cut to one length (10,000 characters)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0016_admin_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="attempts",
            field=models.PositiveSmallIntegerField(
                default=0, help_text="How many times a worker took it."
            ),
        ),
        migrations.AlterField(
            model_name="snapshot",
            name="error",
            field=models.TextField(blank=True, max_length=10000),
        ),
    ]
