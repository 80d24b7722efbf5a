"""API tokens: each user makes, names and revokes their own on the tokens page (django-rest-knox);
a key is shown once and stored only as a digest; revoked and expired tokens get 401."""

from __future__ import annotations

import hashlib
import importlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from labeling.models import ApiToken, Solution
from labeling.services import tokens
from tests.factories import make_batch, make_problem

pytestmark = pytest.mark.django_db


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _stored_values(token: ApiToken) -> list[str]:
    return [str(field.value_from_object(token)) for field in token._meta.concrete_fields]


def test_a_token_made_on_the_page_is_shown_once_used_by_the_api_and_refused_after_revoking(
    client, labeler
):
    client.force_login(labeler)
    page = client.get(reverse("tokens:list"))
    assert page.status_code == 200 and "No tokens yet" in page.content.decode()

    made = client.post(reverse("tokens:list"), {"name": "nightly export", "expires": "30"})
    assert made.status_code == 200
    assert "no-store" in made["Cache-Control"]
    key = made.context["new_key"]
    assert key and key in made.content.decode()
    token = ApiToken.objects.get(user=labeler)
    assert token.name == "nightly export"
    assert token.expiry - timezone.now() == pytest.approx(
        timedelta(days=30), abs=timedelta(minutes=1)
    )
    # The row holds the key's first characters and its digest, never the key.
    assert token.digest == hashlib.sha512(key.encode()).hexdigest()
    assert key not in _stored_values(token) and token.token_key == key[:15]

    listed = client.get(reverse("tokens:list")).content.decode()
    assert "nightly export" in listed and key not in listed
    assert token.last_used is None

    assert _api(key).get("/p/default/api/labelings/").status_code == 200
    token.refresh_from_db()
    assert token.last_used is not None
    listed = client.get(reverse("tokens:list")).content.decode()
    assert timezone.localtime(token.last_used).strftime("%Y-%m-%d %H:%M") in listed

    revoked = client.post(reverse("tokens:revoke", args=[token.digest]))
    assert revoked.status_code == 302
    assert not ApiToken.objects.filter(user=labeler).exists()
    assert _api(key).get("/p/default/api/labelings/").status_code == 401


def test_the_nav_links_every_signed_in_user_to_their_tokens(client, labeler):
    client.force_login(labeler)
    home = client.get(reverse("labeling:guidelines")).content.decode()
    assert f'href="{reverse("tokens:list")}"' in home


def test_a_labelers_token_cannot_do_lead_things_and_gets_403(lead, labeler):
    batch = make_batch(protocol="alternatives")
    problem = make_problem()
    _, labeler_key = tokens.token_create(user=labeler, name="script", expires_in=None)
    _, lead_key = tokens.token_create(user=lead, name="script", expires_in=None)
    as_labeler = _api(labeler_key)
    assert as_labeler.get("/p/default/api/batches/").status_code == 403
    added = as_labeler.post(
        f"/p/default/api/batches/{batch.pk}/problems/", {"problems": [problem.pk]}, format="json"
    )
    assert added.status_code == 403
    assert not Solution.objects.filter(batch=batch).exists()
    assert (
        _api(lead_key).get("/p/default/api/batches/").status_code == 200
    )  # the same call, as a lead


def test_another_users_token_is_neither_listed_nor_revocable_and_gets_404(
    client, labeler, labeler2
):
    theirs, key = tokens.token_create(user=labeler, name="lena's script", expires_in=None)
    client.force_login(labeler2)
    assert "lena&#x27;s script" not in client.get(reverse("tokens:list")).content.decode()
    assert client.post(reverse("tokens:revoke", args=[theirs.digest])).status_code == 404
    assert ApiToken.objects.filter(pk=theirs.pk).exists()
    assert _api(key).get("/p/default/api/labelings/").status_code == 200


def test_an_expired_token_gets_401(labeler):
    token, key = tokens.token_create(user=labeler, name="short", expires_in=timedelta(days=7))
    assert _api(key).get("/p/default/api/labelings/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    assert _api(key).get("/p/default/api/labelings/").status_code == 401
    assert not ApiToken.objects.filter(pk=token.pk).exists()  # knox deletes it when seen


def test_last_use_is_written_at_most_once_a_minute(labeler):
    token, key = tokens.token_create(user=labeler, name="busy", expires_in=None)
    recent = timezone.now() - timedelta(seconds=30)
    ApiToken.objects.filter(pk=token.pk).update(last_used=recent)
    assert _api(key).get("/p/default/api/labelings/").status_code == 200
    token.refresh_from_db()
    assert token.last_used == recent  # used within the minute: no write
    ApiToken.objects.filter(pk=token.pk).update(last_used=recent - timedelta(minutes=1))
    assert _api(key).get("/p/default/api/labelings/").status_code == 200
    token.refresh_from_db()
    assert token.last_used > recent


@pytest.mark.parametrize(
    "data",
    [
        {"name": "", "expires": "30"},
        {"name": "x" * 101, "expires": "30"},
        {"name": "ok", "expires": "forever"},
    ],
    ids=["no name", "long name", "unknown expiry"],
)
def test_a_bad_token_form_is_refused_with_400_and_makes_nothing(client, labeler, data):
    client.force_login(labeler)
    response = client.post(reverse("tokens:list"), data)
    assert response.status_code == 400
    assert response.context["new_key"] is None
    assert not ApiToken.objects.exists()


def test_the_tokens_page_is_for_signed_in_users(client):
    response = client.get(reverse("tokens:list"))
    assert response.status_code == 302 and reverse("login") in response["Location"]
    assert client.post(reverse("tokens:list"), {"name": "x", "expires": "7"}).status_code == 302
    assert not ApiToken.objects.exists()


def test_a_plain_drf_key_from_before_keeps_working_once_hashed_by_the_migration(labeler):
    """labeling 0010 copies DRF authtoken's plain keys as digests and empties that table."""
    key = "0123456789abcdef0123456789abcdef01234567"  # DRF's 40 hex characters
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {qn('authtoken_token')} ({qn('key')} varchar(40) PRIMARY KEY, "
            f"{qn('created')} timestamp with time zone NOT NULL, {qn('user_id')} integer NOT NULL)"
        )
        cursor.execute(
            f"INSERT INTO {qn('authtoken_token')} VALUES (%s, %s, %s)",
            [key, timezone.now() - timedelta(days=100), labeler.pk],
        )
    migration = importlib.import_module("labeling.migrations.0010_api_tokens_hashed")
    state = MigrationExecutor(connection).loader.project_state(
        ("labeling", "0010_api_tokens_hashed")
    )
    # The function reads only the editor's connection (SQLite opens no editor in a transaction).
    migration.hash_drf_keys(state.apps, SimpleNamespace(connection=connection))

    token = ApiToken.objects.get(user=labeler)
    assert key not in _stored_values(token)
    assert token.created < timezone.now() - timedelta(days=99)  # kept from the old row
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {qn('authtoken_token')}")
        assert cursor.fetchone()[0] == 0  # no plain key left
    assert _api(key).get("/p/default/api/labelings/").status_code == 200
