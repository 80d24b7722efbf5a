from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0014_proposal_cap"),
    ]

    operations = [
        migrations.AddField(
            model_name="labeling",
            name="replies_seen_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
