"""Leads add labelers (a one-time sign-in link or a temporary password, shown once), deactivate
and reactivate them, and reset their password; a link signs in once and expires."""

from __future__ import annotations

import re
from importlib import import_module

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.cache import caches
from django.test import Client
from django.urls import reverse

from labeling.models import ApiToken, LabelerRecord, Labeling
from labeling.services import people, rating, tokens
from labeling.services.errors import LabelingError
from tests.factories import make_batch, make_solutions
from tests.helpers.users import api_client_for, make_user
from tests.labeling.helpers import next_labeling, record_of

pytestmark = pytest.mark.django_db
User = get_user_model()


def sign_in_path(credentials: people.Credentials) -> str:
    return reverse("account:sign_in", args=[credentials.uidb64, credentials.token])


# --- the service -------------------------------------------------------------------------------


def test_a_labeler_added_with_a_temporary_password_signs_in_with_it(client):
    credentials = people.labeler_add(username="nina", email="nina@example.org", method="password")
    user = User.objects.get(username="nina")
    assert credentials.password and len(credentials.password) == people.PASSWORD_LENGTH
    assert credentials.password not in user.password  # stored hashed, by Django's hasher
    assert user.check_password(credentials.password)
    assert user.memberships.filter(role="labeler", project__slug="default").exists()
    # Their record in the project, in screening, as any new labeler's.
    assert record_of(user).state == LabelerRecord.State.SCREENING
    response = client.post(reverse("login"), {"username": "nina", "password": credentials.password})
    assert response.status_code == 302 and response["Location"] == reverse("projects")


def test_a_sign_in_link_works_once(client):
    credentials = people.labeler_add(username="nina", method="link")
    user = User.objects.get(username="nina")
    assert not user.has_usable_password()
    path = sign_in_path(credentials)
    confirm = client.get(path)  # a mail scanner's GET does not spend it
    assert confirm.status_code == 200 and "Sign in as nina" in confirm.content.decode()
    assert client.get(path).status_code == 200
    signed_in = client.post(path)
    assert signed_in["Location"] == reverse("account:password")
    assert client.get(reverse("home")).context["user"] == user
    client.logout()
    again = client.post(path)
    assert again.status_code == 400
    assert "no longer works" in again.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_sign_in_link_expires(client, settings):
    credentials = people.labeler_add(username="nina", method="link")
    # Django's token carries its timestamp: a link older than the timeout is refused.
    settings.PASSWORD_RESET_TIMEOUT = -1
    assert people.sign_in_link_user(credentials.uidb64, credentials.token) is None
    assert client.post(sign_in_path(credentials)).status_code == 400
    settings.PASSWORD_RESET_TIMEOUT = 3600
    assert people.sign_in_link_user(credentials.uidb64, credentials.token) is not None


@pytest.mark.parametrize(
    ("uidb64", "token"), [("bm9ib2R5", "abc-def"), ("!!", "x"), ("MTIzNDU2Nzg5", "1-2")]
)
def test_a_made_up_link_signs_nobody_in(client, uidb64, token):
    people.labeler_add(username="nina", method="link")
    assert people.sign_in_link_user(uidb64, token) is None
    assert client.get(reverse("account:sign_in", args=[uidb64, token])).status_code == 400


def test_a_new_link_or_password_replaces_the_old_ones(client):
    first = people.labeler_add(username="nina", method="link")
    user = User.objects.get(username="nina")
    second = people.labeler_password_reset(user=user, method="link")
    assert people.sign_in_link_user(first.uidb64, first.token) is None
    assert people.sign_in_link_user(second.uidb64, second.token) == user
    temporary = people.labeler_password_reset(user=user, method="password")
    assert people.sign_in_link_user(second.uidb64, second.token) is None
    user.refresh_from_db()
    assert user.check_password(temporary.password)


def test_deactivating_releases_the_open_labeling_keeps_ratings_and_stops_tokens(lead):
    nina = make_user("nina", "labeler")
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 2)
    opened = next_labeling(nina)
    rating.rate_step(labeling_id=opened.pk, user=nina, step_index=0, rating=1)
    api = api_client_for(nina)
    assert api.get("/p/default/api/labelings/").status_code == 200
    released = people.labeler_deactivate(user=nina)
    assert released == 1
    opened.refresh_from_db()
    assert opened.status == Labeling.Status.EXPIRED and opened.step_labels.count() == 1
    opened.solution.refresh_from_db()
    assert opened.solution.active_count == 0
    nina.refresh_from_db()
    assert not nina.is_active
    assert not ApiToken.objects.filter(user=nina).exists()
    assert api.get("/p/default/api/labelings/").status_code == 401
    # Another labeler gets the released solution.
    lars = make_user("lars", "labeler")
    assert next_labeling(lars, batch=batch).solution == opened.solution
    people.labeler_reactivate(user=nina)
    nina.refresh_from_db()
    assert nina.is_active
    assert tokens.token_create(user=nina, name="again", expires_in=None)


def test_a_deactivated_labelers_session_and_link_stop_working(client):
    credentials = people.labeler_add(username="nina", method="link")
    nina = User.objects.get(username="nina")
    client.force_login(nina)
    assert client.get(reverse("home")).status_code == 200
    people.labeler_deactivate(user=nina)
    assert client.get(reverse("home")).status_code == 302  # to the sign-in page
    assert people.sign_in_link_user(credentials.uidb64, credentials.token) is None
    with pytest.raises(LabelingError, match="reactivate them first"):
        people.labeler_password_reset(user=nina, method="password")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"username": "lena", "method": "link"}, "is taken"),
        ({"username": "LENA", "method": "password"}, "is taken"),
        ({"username": "nina", "method": "carrier pigeon"}, "Choose how they sign in"),
    ],
)
def test_adding_refuses_a_taken_name_or_an_unknown_method(labeler, kwargs, message):
    with pytest.raises(LabelingError, match=message):
        people.labeler_add(**kwargs)
    assert not User.objects.filter(username="nina").exists()


def test_leads_manage_only_plain_labelers(lead, labeler, researcher):
    both = make_user("rita", "labeler", "researcher")
    managed = set(people.managed_labelers().values_list("username", flat=True))
    assert managed == {"lena"}
    assert both.username not in managed


# --- the pages ---------------------------------------------------------------------------------


def test_a_lead_adds_a_labeler_and_sees_the_password_once(client, lead):
    client.force_login(lead)
    page = client.get(reverse("labeling:labelers"))
    assert "Add a labeler" in page.content.decode()
    response = client.post(
        reverse("labeling:labeler_add"), {"username": "nina", "email": "", "method": "password"}
    )
    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    shown = re.search(r'id="temporary-password"[^>]*value="([^"]+)"', response.content.decode())
    assert shown and User.objects.get(username="nina").check_password(shown.group(1))
    assert shown.group(1) not in client.get(reverse("labeling:labelers")).content.decode()


def test_a_lead_adds_a_labeler_with_a_link_that_signs_them_in(client, lead):
    client.force_login(lead)
    response = client.post(reverse("labeling:labeler_add"), {"username": "nina", "method": "link"})
    link = re.search(r'id="sign-in-link"[^>]*value="([^"]+)"', response.content.decode())
    assert link and link.group(1).startswith("http://testserver/account/sign-in/")
    client.logout()
    path = link.group(1).removeprefix("http://testserver")
    client.post(path)
    response = client.post(
        reverse("account:password"),
        {"new_password1": "a long new passphrase", "new_password2": "a long new passphrase"},
    )
    assert response["Location"] == reverse("projects")
    assert User.objects.get(username="nina").check_password("a long new passphrase")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"username": "", "method": "link"}, "This field is required"),
        ({"username": "no spaces please", "method": "link"}, "Enter a valid username"),
        ({"username": "x" * 151, "method": "link"}, "at most 150 characters"),
        ({"username": "nina", "method": "fax"}, "Select a valid choice"),
        ({"username": "nina", "email": "not-an-address", "method": "link"}, "valid email"),
        ({"username": "Lena", "method": "link"}, "is taken"),
    ],
)
def test_adding_a_labeler_with_bad_input_is_a_clear_400(client, lead, labeler, data, message):
    client.force_login(lead)
    response = client.post(reverse("labeling:labeler_add"), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not User.objects.filter(username__in=["nina", "no spaces please"]).exists()


def test_adding_twice_refuses_the_second(client, lead):
    client.force_login(lead)
    data = {"username": "nina", "method": "password"}
    assert client.post(reverse("labeling:labeler_add"), data).status_code == 201
    again = client.post(reverse("labeling:labeler_add"), data)
    assert again.status_code == 400 and "is taken" in again.content.decode()
    assert User.objects.filter(username="nina").count() == 1


def test_a_lead_deactivates_reactivates_and_resets_from_the_labeler_page(client, lead, labeler):
    client.force_login(lead)
    url = reverse("labeling:labeler_account", args=[labeler.pk])
    page = client.get(reverse("labeling:labeler_detail", args=[labeler.pk])).content.decode()
    assert 'id="deactivate"' in page
    assert client.post(url, {"action": "deactivate"}).status_code == 302
    labeler.refresh_from_db()
    assert not labeler.is_active
    labelers = client.get(reverse("labeling:labelers")).content.decode()
    assert "deactivated" in labelers
    reset = client.post(url, {"action": "reset", "method": "password"})
    assert reset.status_code == 400 and "reactivate them first" in reset.content.decode()
    bad = client.post(url, {"action": "reset", "method": "fax"})
    assert bad.status_code == 400 and "Choose a new sign-in link" in bad.content.decode()
    client.post(url, {"action": "reactivate"})
    labeler.refresh_from_db()
    assert labeler.is_active
    reset = client.post(url, {"action": "reset", "method": "password"})
    assert reset.status_code == 200 and 'id="temporary-password"' in reset.content.decode()
    unknown = client.post(url, {"action": "promote"})
    assert unknown.status_code == 400 and "not &#x27;promote&#x27;" in unknown.content.decode()


def test_only_leads_manage_and_only_labelers_are_managed(client, lead, labeler, researcher):
    other_lead = make_user("leo", "lead", "labeler")
    client.force_login(labeler)
    assert client.post(reverse("labeling:labeler_add"), {"username": "x"}).status_code == 403
    url = reverse("labeling:labeler_account", args=[labeler.pk])
    assert client.post(url, {"action": "deactivate"}).status_code == 403
    client.force_login(lead)
    for user_id in (other_lead.pk, researcher.pk, lead.pk, 999999):
        url = reverse("labeling:labeler_account", args=[user_id])
        assert client.post(url, {"action": "deactivate"}).status_code == 404
    assert User.objects.filter(is_active=False).count() == 0
    assert client.get(reverse("labeling:labeler_account", args=[labeler.pk])).status_code == 405


def test_a_wrong_old_password_is_a_400(client, labeler):
    client.force_login(labeler)
    response = client.post(
        reverse("account:password"),
        {"old_password": "wrong", "new_password1": "a long new one", "new_password2": "x"},
    )
    assert response.status_code == 400
    labeler.refresh_from_db()
    assert labeler.check_password("lena-pw")


# --- who a lead manages: plain labelers only -----------------------------------------------------


def _staff(user):
    user.is_staff = True
    user.save(update_fields=["is_staff"])


def _direct_permission(user):
    user.user_permissions.add(Permission.objects.get(codename="change_user"))


def _extra_group(user):
    user.groups.add(Group.objects.get_or_create(name="annotator-admins")[0])


@pytest.mark.parametrize("more_than_a_labeler", [_staff, _direct_permission, _extra_group])
@pytest.mark.parametrize("action", ["reset-password", "reset-link", "deactivate", "reactivate"])
def test_a_lead_cannot_take_over_an_account_that_is_more_than_a_labeler(
    client, lead, more_than_a_labeler, action
):
    rita = make_user("rita", "labeler")
    more_than_a_labeler(rita)
    token = api_client_for(rita)
    if action == "reactivate":  # an admin deactivated them
        rita.is_active = False
        rita.save(update_fields=["is_active"])
    password_hash = User.objects.get(pk=rita.pk).password
    client.force_login(lead)
    data = {"action": action}
    if action.startswith("reset"):
        data = {"action": "reset", "method": action.removeprefix("reset-")}
    response = client.post(reverse("labeling:labeler_account", args=[rita.pk]), data)
    assert response.status_code == 404
    assert 'id="temporary-password"' not in response.content.decode()
    rita.refresh_from_db()
    assert rita.password == password_hash
    assert rita.is_active == (action != "reactivate")
    if rita.is_active:
        assert token.get("/p/default/api/labelings/").status_code == 200
    assert people.managed_labelers().filter(pk=rita.pk).count() == 0
    page = client.get(reverse("labeling:labeler_detail", args=[rita.pk])).content.decode()
    assert 'id="reset-password"' not in page and "Django's admin" in page


# --- signed out everywhere: a new password, a deactivation --------------------------------------


def signed_in_elsewhere(user) -> tuple[Client, str]:
    """Another browser signed in as `user`, and its session key."""
    browser = Client()
    browser.force_login(user)
    assert browser.get(reverse("home")).status_code == 200
    return browser, browser.session.session_key


def session_copies(session_key: str) -> list[str]:
    """Where a session is still stored: its database row and, beside PostgreSQL, its copy in
    Redis (stepwise.sessions)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    where = []
    if store.get_model_class().objects.filter(session_key=session_key).exists():
        where.append("database")
    cache_key = getattr(store(session_key), "cache_key", None)
    if cache_key is not None and caches[settings.SESSION_CACHE_ALIAS].get(cache_key) is not None:
        where.append("cache")
    return where


@pytest.mark.parametrize("method", people.METHODS)
def test_a_lead_reset_ends_every_session_and_revokes_every_api_token(
    client, lead, labeler, labeler2, method
):
    api = api_client_for(labeler)
    browser, session_key = signed_in_elsewhere(labeler)
    assert session_copies(session_key)
    bystander, bystander_key = signed_in_elsewhere(labeler2)
    client.force_login(lead)
    reset = client.post(
        reverse("labeling:labeler_account", args=[labeler.pk]),
        {"action": "reset", "method": method},
    )
    assert reset.status_code == 200
    assert api.get("/p/default/api/labelings/").status_code == 401
    assert not ApiToken.objects.filter(user=labeler).exists()
    assert session_copies(session_key) == []
    assert browser.get(reverse("home")).status_code == 302  # to the sign-in page
    assert (
        "every session of theirs is ended, their API tokens are revoked" in reset.content.decode()
    )
    # Nobody else is signed out.
    assert session_copies(bystander_key) and bystander.get(reverse("home")).status_code == 200
    assert client.get(reverse("labeling:labelers")).status_code == 200


def test_a_session_from_before_a_deactivation_stays_ended_after_reactivation(client, lead, labeler):
    browser, session_key = signed_in_elsewhere(labeler)
    client.force_login(lead)
    url = reverse("labeling:labeler_account", args=[labeler.pk])
    deactivated = client.post(url, {"action": "deactivate"}, follow=True)
    assert session_copies(session_key) == []
    client.post(url, {"action": "reactivate"})
    labeler.refresh_from_db()
    assert labeler.is_active
    assert browser.get(reverse("home")).status_code == 302
    assert "_auth_user_id" not in browser.session
    assert "every session of theirs is ended" in deactivated.content.decode()


@pytest.mark.parametrize("first_sign_in", ["password", "link"])
def test_changing_ones_own_password_revokes_api_tokens_and_signs_out_other_sessions(
    client, first_sign_in
):
    credentials = people.labeler_add(username="nina", method=first_sign_in)
    nina = User.objects.get(username="nina")
    if first_sign_in == "link":
        client.post(sign_in_path(credentials))
        data = {"new_password1": "a long new passphrase", "new_password2": "a long new passphrase"}
    else:
        client.force_login(nina)
        data = {
            "old_password": credentials.password,
            "new_password1": "a long new passphrase",
            "new_password2": "a long new passphrase",
        }
    api = api_client_for(nina)
    other, other_key = signed_in_elsewhere(nina)
    saved = client.post(reverse("account:password"), data, follow=True)
    assert saved.status_code == 200
    nina.refresh_from_db()
    assert nina.check_password("a long new passphrase")
    assert api.get("/p/default/api/labelings/").status_code == 401
    assert not ApiToken.objects.filter(user=nina).exists()
    assert other.get(reverse("home")).status_code == 302
    assert client.get(reverse("home")).status_code == 200  # this session stays signed in
    assert (
        "Your other sessions are signed out and your 1 API token revoked." in saved.content.decode()
    )


def test_the_admins_own_password_change_is_the_page_that_revokes_tokens(client):
    admin = User.objects.create_superuser("ada", password="ada-pw")
    client.force_login(admin)
    response = client.get("/admin/password_change/")
    assert response.status_code == 302 and response["Location"] == reverse("account:password")
    admin_page = client.get("/admin/").content.decode()
    assert 'href="/admin/password_change/"' in admin_page  # the admin's own link goes there too


def test_a_password_set_in_the_admin_or_by_command_revokes_the_users_tokens(client, monkeypatch):
    from django.contrib.auth.models import update_last_login
    from django.core.management import call_command

    ada = User.objects.create_superuser("ada", password="ada-pw")
    nina = make_user("nina", "labeler")
    api = api_client_for(nina)
    assert api.get("/p/default/api/labelings/").status_code == 200
    client.force_login(ada)
    nina_page = client.get(f"/admin/auth/user/{nina.pk}/password/")
    assert nina_page.status_code == 200
    response = client.post(
        f"/admin/auth/user/{nina.pk}/password/",
        {"password1": "a-new-Secret-91", "password2": "a-new-Secret-91", "usable_password": "true"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not ApiToken.objects.filter(user=nina).exists()
    assert api.get("/p/default/api/labelings/").status_code == 401
    # The command line too (it asks twice on the terminal).
    api = api_client_for(nina)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "another-Secret-72")
    call_command("changepassword", "nina", stdout=open("/dev/null", "w"))
    assert not ApiToken.objects.filter(user=nina).exists()
    assert api.get("/p/default/api/labelings/").status_code == 401
    # A save that leaves the password alone (a sign-in's last_login, a new email) keeps them.
    api = api_client_for(nina)
    nina.refresh_from_db()
    nina.email = "nina@example.org"
    nina.save()
    update_last_login(None, nina)  # what a sign-in saves
    assert ApiToken.objects.filter(user=nina).count() == 1
    assert api.get("/p/default/api/labelings/").status_code == 200


@pytest.mark.parametrize(
    "username",
    [
        "\u0430dmin",  # a Cyrillic а
        "l\u0435na",  # a Cyrillic е, beside the existing "lena"
        "\uff4c\uff45\uff4e\uff41",  # fullwidth "lena"
        "jos\u00e9",
    ],
)
def test_a_look_alike_username_is_refused(client, lead, labeler, username):
    client.force_login(lead)
    users = User.objects.count()
    response = client.post(
        reverse("labeling:labeler_add"), {"username": username, "method": "link"}
    )
    assert response.status_code == 400
    assert "Enter a valid username" in response.content.decode()
    with pytest.raises(LabelingError, match="Enter a valid username"):
        people.labeler_add(username=username, method="link")
    assert User.objects.count() == users


# --- lockouts: the lead's reset lifts one, the pages show it --------------------------------------


def lock_out(browser: Client, username: str) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        browser.post(reverse("login"), {"username": username, "password": "wrong"})
    right = browser.post(reverse("login"), {"username": username, "password": f"{username}-pw"})
    assert right.status_code == 429


def test_a_lead_reset_lifts_a_lockout_so_the_new_password_signs_in_at_once(client, lead, labeler):
    locked = Client()
    lock_out(locked, "lena")
    client.force_login(lead)
    reset = client.post(
        reverse("labeling:labeler_account", args=[labeler.pk]),
        {"action": "reset", "method": "password"},
    )
    password = re.search(r'id="temporary-password"[^>]*value="([^"]+)"', reset.content.decode())
    assert password
    signed_in = locked.post(reverse("login"), {"username": "lena", "password": password.group(1)})
    assert signed_in.status_code == 302 and "_auth_user_id" in locked.session
    assert not AccessAttempt.objects.filter(username="lena").exists()
    assert "a sign-in lockout is lifted" in reset.content.decode()


def test_the_people_pages_show_a_lockout_and_the_reset_that_lifts_it(
    client, lead, labeler, labeler2
):
    lock_out(Client(), "lena")
    client.force_login(lead)
    roster = client.get(reverse("labeling:labelers")).content.decode()
    rows = {
        name: row
        for row in roster.split("<tr")
        for name in ("lena", "lars")
        if f">{name}</a>" in row
    }
    assert "locked out" in rows["lena"] and "locked out" not in rows["lars"]
    page = client.get(reverse("labeling:labeler_detail", args=[labeler.pk])).content.decode()
    assert 'id="locked-out"' in page and "lifts it at once" in page
    other = client.get(reverse("labeling:labeler_detail", args=[labeler2.pk])).content.decode()
    assert 'id="locked-out"' not in other
    client.post(
        reverse("labeling:labeler_account", args=[labeler.pk]),
        {"action": "reset", "method": "link"},
    )
    page = client.get(reverse("labeling:labeler_detail", args=[labeler.pk])).content.decode()
    assert 'id="locked-out"' not in page
    assert "locked out" not in client.get(reverse("labeling:labelers")).content.decode()
