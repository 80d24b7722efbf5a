"""Store the release line of completed labelings from before it was stored at submission, so
exports stream one column and `prm800k.render_record` is the only renderer (the same code as
`manage.py store_release_lines`)."""

from django.db import migrations


def store_older_release_lines(apps, schema_editor):
    Labeling = apps.get_model("labeling", "Labeling")
    if not Labeling.objects.filter(status="completed", release_line__isnull=True).exists():
        return  # a fresh database, or one already filled
    # The current code, not the historical models: the line must be what an export renders.
    # It reads the columns this migration's predecessors made.
    from labeling.services.exporting import store_release_lines

    store_release_lines()


class Migration(migrations.Migration):
    dependencies = [("labeling", "0010_api_tokens_hashed")]

    operations = [
        migrations.RunPython(store_older_release_lines, migrations.RunPython.noop, elidable=True),
    ]
