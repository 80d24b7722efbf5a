"""People: leads add labelers, deactivate and reactivate them, reset their password (from the
Labelers page, without Django's admin); a labeler signs in once with a link and sets a password.

A new password or link is shown once, on the answer to the lead's request: never stored in the
clear, never kept by a cache (`never_cache`)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login, update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm, SetPasswordForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from labeling import selectors
from labeling.forms import LabelerAddForm, PasswordResetChoiceForm
from labeling.models import LabelerRecord, Membership
from labeling.roles import LEAD, current_project, require
from labeling.services import people, projects, quality
from labeling.services.errors import LabelingError
from stepwise.request_types import AuthenticatedRequest

LEADS_ONLY = "This page is for leads."
# The backend that signs in a user the link vouches for (django-axes' counts only passwords).
SIGN_IN_BACKEND = "stepwise.sessions.ModelBackend"


def labelers_page(
    request: AuthenticatedRequest, form: LabelerAddForm | None = None, status: int = 200
):
    labelers = selectors.all_labelers(request.project)
    context = {
        "labelers": labelers,
        "locked_out": selectors.locked_out_usernames([row.user.username for row in labelers]),
        "add_form": form or LabelerAddForm(),
        "members": Membership.objects.filter(project=request.project)
        .select_related("user")
        .order_by("user__username", "role"),
        "member_roles": Membership.Role.choices,
    }
    return render(request, "labeling/lead/labelers.html", context, status=status)


def labeler_page(request: AuthenticatedRequest, user, status: int = 200) -> HttpResponse:
    """A labeler's page in the request's project: their record there (state, screening, gold
    results, agreement), their labelings there, and their account where a lead manages it
    (`people.managed_labelers`). Nothing of their work in another project."""
    record = selectors.labeler_record(user, request.project)
    rolling, rolling_n = quality.rolling_gold_accuracy(record)
    context = {
        "subject": user,
        "record": record,
        "rolling": rolling,
        "rolling_n": rolling_n,
        "results": selectors.screening_results(user.pk, request.project),
        "recent": selectors.recent_labelings(user.pk, project=request.project),
        "states": LabelerRecord.State,
        "managed": people.managed_labelers(request.project).filter(pk=user.pk).exists(),
        "locked_out": bool(selectors.locked_out_usernames([user.username])),
    }
    return render(request, "labeling/lead/labeler.html", context, status=status)


def _duration(seconds: int) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day{pluralize(days)}"
    hours = max(1, round(seconds / 3600))
    return f"{hours} hour{pluralize(hours)}"


def _credentials_page(
    request: AuthenticatedRequest, credentials: people.Credentials, *, added: bool
):
    link = None
    if credentials.token is not None:
        link = request.build_absolute_uri(
            reverse("account:sign_in", args=[credentials.uidb64, credentials.token])
        )
    context = {
        "subject": credentials.user,
        "password": credentials.password,
        "link": link,
        "added": added,
        "link_valid_for": _duration(settings.PASSWORD_RESET_TIMEOUT),
    }
    return render(request, "labeling/lead/credentials.html", context, status=201 if added else 200)


@never_cache
@login_required
@require_POST
def labeler_add(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    form = LabelerAddForm(request.POST)
    if not form.is_valid():
        return labelers_page(request, form, status=400)
    try:
        credentials = people.labeler_add(
            username=form.cleaned_data["username"],
            email=form.cleaned_data["email"],
            method=form.cleaned_data["method"],
            project=request.project,
        )
    except LabelingError as refused:
        form.add_error("username", str(refused))
        return labelers_page(request, form, status=refused.status_code)
    return _credentials_page(request, credentials, added=True)


@login_required
@require_POST
def member_change(request: AuthenticatedRequest) -> HttpResponse:
    """A lead adds an existing user to their project in a role, or takes a role away
    (`action` add or remove; the user by `username`). Their work in the project stays."""
    require(request, LEAD, message=LEADS_ONLY)
    project = current_project(request)
    username = request.POST.get("username", "").strip()[:150]
    role = request.POST.get("role", "")
    action = request.POST.get("action", "")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        messages.error(request, f"No user “{username}”: add a labeler with the form below.")
        return labelers_page(request, status=404)
    try:
        if action == "add":
            projects.member_add(project=project, user=user, role=role)
            messages.info(request, f"{username} is now a {role} in {project.name}.")
        elif action == "remove":
            if user == request.user and role == LEAD:
                raise LabelingError("You cannot take your own lead role away; ask an admin.")
            projects.member_remove(project=project, user=user, role=role)
            messages.info(request, f"{username} is no longer a {role} in {project.name}.")
        else:
            raise LabelingError(f"Choose add or remove, not {action[:30]!r}.")
    except LabelingError as refused:
        messages.error(request, str(refused))
        return labelers_page(request, status=400)
    return redirect("labeling:labelers")


@never_cache
@login_required
@require_POST
def labeler_account(request: AuthenticatedRequest, user_id: int) -> HttpResponse:
    """Deactivate, reactivate, or reset the password (a new link or a temporary password)."""
    require(request, LEAD, message=LEADS_ONLY)
    user = get_object_or_404(people.managed_labelers(request.project), pk=user_id)
    action = request.POST.get("action", "")
    name = user.get_username()
    if action == "deactivate":
        released = people.labeler_deactivate(user=user)
        note = " Their open solution went back to the pool, their ratings kept." if released else ""
        messages.info(
            request,
            f"{name} is deactivated: they can no longer sign in, every session of theirs is "
            f"ended and their API tokens are revoked.{note}",
        )
    elif action == "reactivate":
        people.labeler_reactivate(user=user)
        messages.info(request, f"{name} can sign in again.")
    elif action == "reset":
        form = PasswordResetChoiceForm(request.POST)
        try:
            if not form.is_valid():
                raise LabelingError("Choose a new sign-in link or a temporary password.")
            credentials = people.labeler_password_reset(
                user=user, method=form.cleaned_data["method"]
            )
        except LabelingError as refused:
            messages.error(request, str(refused))
            return labeler_page(request, user, status=400)
        return _credentials_page(request, credentials, added=False)
    else:
        messages.error(request, f"Choose deactivate, reactivate or reset, not {action[:30]!r}.")
        return labelers_page(request, status=400)
    return redirect("labeling:labeler_detail", user_id=user.pk)


@never_cache
@require_http_methods(["GET", "POST"])
def sign_in(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """A one-time link: the page asks to confirm (a mail scanner's GET must not spend it), the
    POST signs in (which changes `last_login`, so the link is spent) and asks for a password."""
    user = people.sign_in_link_user(uidb64, token)
    if user is None:
        return render(request, "registration/sign_in_link.html", {"invalid": True}, status=400)
    if request.method == "POST":
        login(request, user, backend=SIGN_IN_BACKEND)
        messages.info(request, "You are signed in. Choose a password to sign in next time.")
        return redirect("account:password")
    return render(request, "registration/sign_in_link.html", {"subject": user})


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def password(request: AuthenticatedRequest) -> HttpResponse:
    """Choose a password (after a sign-in link), or change one (a temporary one, say)."""
    form_class = PasswordChangeForm if request.user.has_usable_password() else SetPasswordForm
    form = form_class(request.user, request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            revoked = people.password_change(
                user=request.user, password=form.cleaned_data["new_password1"]
            )
            update_session_auth_hash(request, request.user)  # this session stays signed in
            tokens = f" and your {revoked} API token{pluralize(revoked)} revoked" if revoked else ""
            messages.info(
                request, f"Your password is saved. Your other sessions are signed out{tokens}."
            )
            return redirect("projects")
        return render(request, "registration/password.html", {"form": form}, status=400)
    return render(request, "registration/password.html", {"form": form})
