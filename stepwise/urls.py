from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from labeling.forms import SignInForm
from stepwise import views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=SignInForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("labeling.urls")),  # /label/, /research/, /api/
    path(
        "", include("modeling.urls")
    ),  # /modeling/, /generations/, /api/{runs,models,generations}/
    # One page changes one's own password, the one that also revokes one's API tokens.
    path(
        "admin/password_change/",
        RedirectView.as_view(pattern_name="account:password"),
    ),
    path("admin/", admin.site.urls),
]

# Pages in the app's style (JSON under /api/). A database that cannot be reached answers 503
# with Retry-After; anything else a plain 500.
handler403 = "stepwise.views.permission_denied"
handler404 = "stepwise.views.page_not_found"
handler500 = "stepwise.views.server_error"
