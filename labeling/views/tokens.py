"""A user's own API tokens: make one (its key shown once), see when each was last used, revoke."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from labeling import selectors
from labeling.forms import ApiTokenForm
from labeling.services import tokens
from labeling.services.errors import LabelingError
from stepwise.request_types import AuthenticatedRequest


@never_cache  # the response that shows a new key must not be kept by any cache
@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: AuthenticatedRequest) -> HttpResponse:
    """Any signed-in user: a token carries its owner's roles, no more."""
    form = ApiTokenForm(request.POST or None)
    new_key = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _, new_key = tokens.token_create(
                    user=request.user,
                    name=form.cleaned_data["name"],
                    expires_in=form.expires_in(),
                )
                form = ApiTokenForm()
            except LabelingError as error:
                form.add_error(None, str(error))
                status = error.status_code
        else:
            status = 400
    context = {"form": form, "tokens": selectors.api_tokens(request.user), "new_key": new_key}
    return render(request, "labeling/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: AuthenticatedRequest, digest: str) -> HttpResponse:
    if not tokens.token_revoke(user=request.user, digest=digest):
        raise Http404("No such token of yours.")
    messages.success(request, "Token revoked: requests with it are refused from now on.")
    return redirect("tokens:list")
