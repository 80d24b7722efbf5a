from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0012_labeling_skipped"),
    ]

    operations = [
        migrations.AddField(
            model_name="proposedsteps",
            name="dropped",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="Samples that gave no candidate, by reason: why there are fewer than k.",
            ),
        ),
        migrations.AlterField(
            model_name="proposedsteps",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("running", "running"),
                    ("ready", "ready"),
                    ("failed", "failed"),
                    ("stopped", "stopped"),
                ],
                default="pending",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="proposedsteps",
            name="steps",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Up to k distinct candidates, in the order they were found; only "
                "appended to (ratings refer to them by position).",
            ),
        ),
    ]
