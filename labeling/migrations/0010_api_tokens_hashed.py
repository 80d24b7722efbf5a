"""API tokens move to django-rest-knox, stored hashed (labeling.ApiToken).

The keys DRF's authtoken app kept in plain text (authtoken_token, when that app was installed) are
copied as knox rows: knox finds a token by its first 15 characters and compares the SHA-512 of
the whole key, which works for a 40-character DRF key as for its own, so existing clients keep
working. Then the plain keys are deleted; the emptied table is left for `authtoken`'s own
migrations (drop it by hand if you like).
"""

import datetime
import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone
from django.utils.dateparse import parse_datetime

# knox's digest (knox.crypto.hash_token with its default SECURE_HASH_ALGORITHM): SHA-512 of the
# key's UTF-8 bytes, as hex. Written out here so that the migration does not change with knox.
TOKEN_KEY_LENGTH = 15
LEGACY_TABLE = "authtoken_token"


def hash_drf_keys(apps, schema_editor):
    connection = schema_editor.connection
    if LEGACY_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("labeling", "ApiToken")
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {qn('key')}, {qn('user_id')}, {qn('created')} FROM {qn(LEGACY_TABLE)}"
        )
        rows = cursor.fetchall()
    for key, user_id, created in rows:
        digest = hashlib.sha512(key.encode()).hexdigest()
        ApiToken.objects.create(
            digest=digest,
            token_key=key[:TOKEN_KEY_LENGTH],
            user_id=user_id,
            name="API token (from before tokens were hashed)",
        )
        if isinstance(created, str):  # SQLite without a column converter
            created = parse_datetime(created)
        if created is not None and timezone.is_naive(created):
            created = timezone.make_aware(created, datetime.UTC)
        ApiToken.objects.filter(pk=digest).update(created=created)  # auto_now_add set it
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {qn(LEGACY_TABLE)}")


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0009_one_open_labeling"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("digest", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("token_key", models.CharField(db_index=True, max_length=25)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("expiry", models.DateTimeField(blank=True, null=True)),
                ("name", models.CharField(max_length=100)),
                ("last_used", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="auth_token_set",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created"],
            },
        ),
        migrations.RunPython(hash_drf_keys, migrations.RunPython.noop),
    ]
