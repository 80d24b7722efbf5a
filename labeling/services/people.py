"""Leads manage their labelers' accounts without Django's admin: add one (with a one-time sign-in
link or a temporary password, shown once), deactivate or reactivate one, reset a password; and
anyone changes their own password.

Django's own machinery does the security: passwords through the configured hashers
(`set_password`, `set_unusable_password`), one-time links through `default_token_generator`.
Its token hashes the user's password hash and last sign-in with a timestamp, so a link works
once (signing in changes `last_login`), dies with a new password, and expires after
PASSWORD_RESET_TIMEOUT seconds. A new password or a deactivation signs the user out everywhere:
their sessions end and their API tokens are revoked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from axes.utils import reset as axes_reset
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, User
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import ASCIIUsernameValidator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils.crypto import get_random_string
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from labeling.models import ApiToken, Membership, Project, default_project_id
from labeling.models.projects import project_pk
from labeling.roles import LABELER
from labeling.services.errors import LabelingError
from labeling.services.projects import member_add
from labeling.services.queue import labelings_release
from labeling.services.tokens import tokens_revoke_all
from stepwise.sessions import user_sessions_end

LINK = "link"
PASSWORD = "password"
METHODS = (LINK, PASSWORD)
# Letters and digits a person can read out: no 0/O, 1/l/I.
PASSWORD_CHARS = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
PASSWORD_LENGTH = 16


@dataclass(frozen=True)
class Credentials:
    """What the lead hands over, once: a temporary password or a one-time sign-in link's parts
    (the view turns `uidb64` and `token` into the link's address)."""

    user: AbstractBaseUser
    password: str | None = None
    uidb64: str | None = None
    token: str | None = None


def managed_labelers(project: Any = None) -> QuerySet:
    """The accounts a lead of `project` (the Default project when none is named) manages: plain
    labelers of that project, a labeler and nothing more in every project: no other role, no
    group, no staff or superuser flag, no permission of their own. Anything more is managed in
    Django's admin: a lead who could reset such an account could sign in as it and use what it
    holds (a staff labeler's admin, another project's lead role, say). Any other user id is not
    found here."""
    User = get_user_model()
    project_id = project_pk(project)
    any_group = User.groups.through.objects.filter(user=OuterRef("pk"))
    other_role = Membership.objects.filter(user=OuterRef("pk")).exclude(role=LABELER)
    labeler_here = Membership.objects.filter(
        user=OuterRef("pk"), project_id=project_id, role=LABELER
    )
    own_permission = User.user_permissions.through.objects.filter(user=OuterRef("pk"))
    return User.objects.filter(
        ~Exists(any_group),
        ~Exists(other_role),
        ~Exists(own_permission),
        Exists(labeler_here),
        is_staff=False,
        is_superuser=False,
    )


def _credentials(user: AbstractBaseUser, method: str) -> Credentials:
    """Replace the user's password: a temporary one (returned, stored hashed) or none at all
    with a one-time link to sign in. Either way every earlier password, link and session of
    theirs stops working (sessions carry a hash of the password)."""
    if method == PASSWORD:
        password = get_random_string(PASSWORD_LENGTH, PASSWORD_CHARS)
        user.set_password(password)
        user.save(update_fields=["password"])
        return Credentials(user=user, password=password)
    if method == LINK:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        return Credentials(
            user=user,
            uidb64=urlsafe_base64_encode(force_bytes(user.pk)),
            token=default_token_generator.make_token(user),
        )
    raise LabelingError(f"Choose how they sign in: {' or '.join(METHODS)}, not {method[:30]!r}.")


def _signed_out_everywhere(user: AbstractBaseUser) -> None:
    """Revoke the user's API tokens and end every session of theirs: nothing signed in before (a
    browser, a script) outlives a new password or a deactivation, nor comes back with a
    reactivation."""
    tokens_revoke_all(user=user)
    user_sessions_end(user.pk)


def labeler_add(*, username: str, email: str = "", method: str, project: Any = None) -> Credentials:
    """A new labeler account (the labeler role in `project`, the Default project when none is
    named; a labeler record starting in screening)."""
    if method not in METHODS:
        raise LabelingError(f"Choose how they sign in: {' or '.join(METHODS)}.")
    User = get_user_model()
    username = username.strip()
    try:
        # ASCII only: "аdmin" with a Cyrillic а would pass for "admin" on every page.
        ASCIIUsernameValidator()(username)
    except ValidationError as invalid:
        raise LabelingError(" ".join(invalid.messages)) from None
    if User.objects.filter(username__iexact=username).exists():
        raise LabelingError(f"The username “{username}” is taken; choose another.")
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, email=email.strip())
            member_add(
                project=Project.objects.get(pk=default_project_id())
                if project is None
                else project,
                user=user,
                role=LABELER,
            )
            return _credentials(user, method)
    except IntegrityError:  # the same name added at the same moment by another lead
        raise LabelingError(f"The username “{username}” is taken; choose another.") from None


def labeler_deactivate(*, user: User) -> int:
    """Sign the labeler out for good: no sign-in, every session ended, every API token revoked.
    Their open labeling goes back to the pool, its ratings kept (as a lapsed claim's are).
    Returns how many labelings were released."""
    with transaction.atomic():
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        user.is_active = False
        _signed_out_everywhere(user)
    return labelings_release(user)


def labeler_reactivate(*, user: User) -> None:
    get_user_model().objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True


def labeler_password_reset(*, user: AbstractBaseUser, method: str) -> Credentials:
    """A new sign-in link or temporary password (`_credentials`). The labeler is signed out
    everywhere, and a sign-in lockout of their username is lifted (django-axes): the lockout page
    sends them to the lead for exactly this, so the new password must work at once."""
    if not user.is_active:
        raise LabelingError(f"{user.get_username()} is deactivated: reactivate them first.")
    with transaction.atomic():
        credentials = _credentials(user, method)  # its save revokes the API tokens
        user_sessions_end(user.pk)
        axes_reset(username=user.get_username())
    return credentials


def password_change(*, user: AbstractBaseUser, password: str) -> int:
    """The user's own new password (validated by Django's password forms). Their API tokens are
    revoked (by the save: `tokens.revoke_tokens_after_password_change`); their other sessions end
    on their next request, as each carries the old password's hash (the view keeps its own with
    update_session_auth_hash). Returns how many tokens."""
    with transaction.atomic():
        tokens = ApiToken.objects.filter(user=user).count()
        user.set_password(password)
        user.save(update_fields=["password"])
        return tokens


def sign_in_link_user(uidb64: str, token: str) -> User | None:
    """The active user a one-time link signs in, or None: unknown, used, expired, replaced by a
    newer password or link, or the account deactivated."""
    User = get_user_model()
    try:
        user = User.objects.get(pk=int(urlsafe_base64_decode(uidb64).decode()))
    except (ValueError, TypeError, OverflowError, User.DoesNotExist):
        return None
    if not user.is_active or not default_token_generator.check_token(user, token):
        return None
    return user
