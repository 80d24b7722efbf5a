"""Training pages under /modeling/ and the API under /api/runs/, /api/models/ (one include)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from modeling import api_runs, views_runs

app_name = "modeling_runs"

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("runs", api_runs.TrainingRunViewSet, basename="run-api")
router.register("models", api_runs.ModelVersionViewSet, basename="model-api")

urlpatterns = [
    path("modeling/runs/", views_runs.run_list, name="list"),
    path("modeling/runs/<int:run_id>/", views_runs.run_detail, name="detail"),
    path("modeling/runs/<int:run_id>/cancel/", views_runs.run_cancel, name="cancel"),
    path("modeling/runs/<int:run_id>/resume/", views_runs.run_resume, name="resume"),
    path("modeling/models/", views_runs.model_list, name="models"),
    path("modeling/models/<int:version_id>/activate/", views_runs.model_activate, name="activate"),
    path("api/", include(router.urls)),
]
