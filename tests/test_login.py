"""Signing in: failed attempts are throttled per account and per address (django-axes)."""

from django.conf import settings
from django.urls import reverse

from tests.conftest import make_user


def _sign_in(client, username, password, address="10.0.0.1"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_a_right_password_signs_in(client, db):
    make_user("lena", "labeler")
    response = _sign_in(client, "lena", "lena-pw")
    assert response.status_code == 302 and "_auth_user_id" in client.session


def test_an_account_is_locked_after_the_failure_limit_even_with_the_right_password(client, db):
    make_user("lena", "labeler")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "lena", "wrong").status_code == 200  # the form, with its error
    locked = _sign_in(client, "lena", "wrong")
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "paused for 15 minutes" in locked.content.decode()
    # Locked: the right password from another address does not get in either.
    assert _sign_in(client, "lena", "lena-pw", address="10.0.0.2").status_code == 429
    assert "_auth_user_id" not in client.session
    # Another account is not affected from a fresh address.
    make_user("omar", "labeler")
    assert _sign_in(client, "omar", "omar-pw", address="10.0.0.3").status_code == 302


def test_an_address_guessing_many_accounts_is_locked(client, db):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, f"user{i}", "guess", address="10.9.9.9")
    make_user("lena", "labeler")
    assert _sign_in(client, "lena", "lena-pw", address="10.9.9.9").status_code == 429
    assert _sign_in(client, "lena", "lena-pw", address="10.0.0.5").status_code == 302
