"""Signing in: failed attempts are throttled per account and address together (django-axes); the
address is the proxy's X-Forwarded-For only behind the proxy (STEPWISE_BEHIND_TLS_PROXY)."""

from axes.models import AccessAttempt
from django.conf import settings
from django.urls import reverse

from labeling.services import people
from tests.helpers.users import make_user

PROXY = "172.18.0.5"  # the compose file's Caddy, as gunicorn sees it


def _sign_in(client, username, password, address="10.0.0.1", forwarded=None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    return client.post(
        reverse("login"),
        {"username": username, "password": password},
        REMOTE_ADDR=address,
        **extra,
    )


def _fail_to_the_limit(client, username, **where):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, username, "wrong", **where)


def test_a_right_password_signs_in(client, db):
    make_user("lena", "labeler")
    response = _sign_in(client, "lena", "lena-pw")
    assert response.status_code == 302 and "_auth_user_id" in client.session


def test_an_account_is_locked_from_an_address_after_the_failure_limit_even_with_the_right_password(
    client, db
):
    make_user("lena", "labeler")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "lena", "wrong").status_code == 200  # the form, with its error
    locked = _sign_in(client, "lena", "wrong")
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "paused for 15 minutes" in locked.content.decode()
    assert _sign_in(client, "lena", "lena-pw").status_code == 429
    assert "_auth_user_id" not in client.session
    # The lock is on this account from this address: another account there is not affected.
    make_user("omar", "labeler")
    assert _sign_in(client, "omar", "omar-pw").status_code == 302
    attempt = AccessAttempt.objects.get(username="lena")
    assert attempt.ip_address == "10.0.0.1"
    assert attempt.failures_since_start >= settings.AXES_FAILURE_LIMIT


def test_failures_as_nonexistent_users_from_one_address_do_not_lock_out_lead(client, db):
    _fail_to_the_limit(client, "ghost", address="10.9.9.9")
    for i in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, f"user{i}", "guess", address="10.9.9.9")
    make_user("lead", "lead")
    assert _sign_in(client, "lead", "lead-pw", address="10.9.9.9").status_code == 302
    assert "_auth_user_id" in client.session
    assert not AccessAttempt.objects.filter(username="lead").exists()  # reset on success


def test_behind_the_proxy_x_forwarded_for_tells_clients_apart(client, db, settings):
    settings.BEHIND_TLS_PROXY = True
    make_user("lead", "lead")
    # Every request comes from the proxy's address; the header it writes names the client.
    _fail_to_the_limit(client, "lead", address=PROXY, forwarded="203.0.113.7")
    assert (
        _sign_in(client, "lead", "lead-pw", address=PROXY, forwarded="203.0.113.7").status_code
        == 429
    )
    assert AccessAttempt.objects.get(username="lead").ip_address == "203.0.113.7"
    # Another client behind the same proxy signs in as lead.
    other = _sign_in(client, "lead", "lead-pw", address=PROXY, forwarded="198.51.100.9")
    assert other.status_code == 302 and "_auth_user_id" in client.session


def test_without_a_proxy_x_forwarded_for_is_ignored_and_cannot_dodge_a_lockout(
    client, db, settings
):
    settings.BEHIND_TLS_PROXY = False
    make_user("lead", "lead")
    for i in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, "lead", "wrong", address="10.0.0.1", forwarded=f"198.51.100.{i}")
    fresh_header = _sign_in(client, "lead", "lead-pw", address="10.0.0.1", forwarded="192.0.2.1")
    assert fresh_header.status_code == 429
    assert AccessAttempt.objects.get(username="lead").ip_address == "10.0.0.1"
    # The lock is by account and address: lead from another address signs in.
    assert _sign_in(client, "lead", "lead-pw", address="10.0.0.2").status_code == 302


def test_a_deactivated_user_is_told_so_only_with_the_right_password_and_is_not_signed_in(
    client, db
):
    lena = make_user("lena", "labeler")
    people.labeler_deactivate(user=lena)
    right = _sign_in(client, "lena", "lena-pw")
    assert right.status_code == 200 and "_auth_user_id" not in client.session
    assert "This account is deactivated: ask your project lead" in right.content.decode()
    # The right password is no failed attempt: retrying it never locks them out.
    assert not AccessAttempt.objects.filter(username="lena").exists()
    # A wrong password says what it says for anyone, and counts toward the lockout.
    wrong = _sign_in(client, "lena", "wrong").content.decode()
    nobody = _sign_in(client, "nobody", "wrong").content.decode()
    for page in (wrong, nobody):
        assert "didn&#x27;t match" in page and "deactivated" not in page
    assert AccessAttempt.objects.get(username="lena").failures_since_start == 1
    _fail_to_the_limit(client, "lena")
    assert _sign_in(client, "lena", "lena-pw").status_code == 429
    # Django's admin refuses them too.
    lena.is_staff = True
    lena.save(update_fields=["is_staff"])
    admin = client.post(
        "/admin/login/", {"username": "lena", "password": "lena-pw"}, REMOTE_ADDR="10.0.0.2"
    )
    assert admin.status_code == 200 and "_auth_user_id" not in client.session
