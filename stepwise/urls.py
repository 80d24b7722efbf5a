from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from stepwise import views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("labeling.urls")),  # /label/, /research/, /api/
    path(
        "", include("modeling.urls")
    ),  # /modeling/, /generations/, /api/{runs,models,generations}/
    path("admin/", admin.site.urls),
]

# Pages in the app's style (JSON under /api/). A database that cannot be reached answers 503
# with Retry-After; anything else a plain 500.
handler403 = "stepwise.views.permission_denied"
handler404 = "stepwise.views.page_not_found"
handler500 = "stepwise.views.server_error"
