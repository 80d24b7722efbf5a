"""A signed-in session's user, read by SQL compiled once per connection (stepwise.sessions)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from stepwise import sessions
from tests.helpers.users import make_user

pytestmark = pytest.mark.django_db


def test_a_signed_in_session_reads_its_user_compiled_once_and_loses_it_when_deactivated(
    client, monkeypatch
):
    labeler = make_user("uma", "labeler")
    compiles = []
    original = sessions.CompiledQuery._compile
    monkeypatch.setattr(
        sessions.CompiledQuery,
        "_compile",
        lambda self, one: compiles.append(self) or original(self, one),
    )
    response = client.post(reverse("login"), {"username": "uma", "password": "uma-pw"})
    assert response.status_code == 302
    assert client.session["_auth_user_backend"] == "stepwise.sessions.ModelBackend"
    for _ in range(2):
        page = client.get(reverse("labeling:queue"))
        assert page.status_code == 200 and page.context["user"] == labeler
    assert compiles.count(sessions.USER_READ) <= 1  # compiled once, or before this test
    labeler.is_active = False
    labeler.save(update_fields=["is_active"])
    refused = client.get(reverse("labeling:queue"))
    assert refused.status_code == 302 and "/accounts/login/" in refused["Location"]


def test_a_session_whose_user_is_gone_is_signed_out(client):
    gone = make_user("ivy", "labeler")
    client.force_login(gone)
    gone.delete()
    response = client.get(reverse("labeling:queue"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert sessions.ModelBackend().get_user(10**12) is None
