from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("modeling", "0006_sampling_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="generationrun",
            name="sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="samplingrun",
            name="sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
