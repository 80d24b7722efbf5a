from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("labeling", "0005_snapshot")]

    operations = [
        migrations.RenameField(model_name="labeling", old_name="raw_line", new_name="release_line"),
        migrations.AlterField(
            model_name="labeling",
            name="release_line",
            field=models.TextField(blank=True, null=True),
        ),
    ]
