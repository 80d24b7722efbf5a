"""The API as its schema shows it: the project's endpoints under /p/{project}/api/ (a path
parameter: the project's slug, `GET /api/projects/` lists them), the projects' list beside."""

from django.urls import include, path

from labeling import urls as labeling_urls

urlpatterns = [
    path("p/<slug:project>/", include(labeling_urls.urlpatterns)),
    path("p/<slug:project>/", include("modeling.urls")),
    path("", include(labeling_urls.global_urlpatterns)),
]
