"""The modeling app's pages and API, under three namespaces (the templates reverse them):

- `modeling_runs`: training pages under /modeling/ (best-of-N comparisons under
  /modeling/best-of-n/), the API under /api/runs/, /api/models/, /api/evaluation-sets/ and
  /api/best-of-n/;
- `modeling_loop`: generation pages under /generations/ and sampling runs under
  /pool/sampling/, the API under /api/generations/ and /api/sampling-runs/;
- `modeling_review`: model-assisted review under /modeling/review/;
- `modeling_prelabel`: pre-label runs (judges) under /modeling/prelabel-runs/, the API under
  /api/prelabel-runs/.
"""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from modeling.api import best_of_n as best_of_n_api
from modeling.api import loop as loop_api
from modeling.api import prelabel as prelabel_api
from modeling.api import runs as runs_api
from modeling.views import best_of_n as best_of_n_views
from modeling.views import loop as loop_views
from modeling.views import prelabel as prelabel_views
from modeling.views import review as review_views
from modeling.views import runs as runs_views

run_router = DefaultRouter(trailing_slash=True)
run_router.include_root_view = False
run_router.register("runs", runs_api.TrainingRunViewSet, basename="run-api")
run_router.register("models", runs_api.ModelVersionViewSet, basename="model-api")
run_router.register("evaluation-sets", runs_api.EvaluationSetViewSet, basename="evaluation-set-api")
run_router.register("best-of-n", best_of_n_api.BestOfNComparisonViewSet, basename="best-of-n-api")

run_patterns = [
    path("modeling/runs/", runs_views.run_list, name="list"),
    path("modeling/runs/<int:run_id>/", runs_views.run_detail, name="detail"),
    path(
        "modeling/evaluation-set/",
        runs_views.evaluation_set_create,
        name="evaluation_set_create",
    ),
    path("modeling/runs/<int:run_id>/cancel/", runs_views.run_cancel, name="cancel"),
    path("modeling/runs/<int:run_id>/resume/", runs_views.run_resume, name="resume"),
    path("modeling/models/", runs_views.model_list, name="models"),
    path("modeling/models/<int:version_id>/activate/", runs_views.model_activate, name="activate"),
    path("modeling/models/<int:version_id>/", runs_views.model_detail, name="model"),
    path(
        "modeling/models/<int:version_id>/export/",
        runs_views.model_export_start,
        name="export_start",
    ),
    path("modeling/models/<int:version_id>/export.zip", runs_views.model_export, name="export"),
    path("modeling/best-of-n/", best_of_n_views.comparison_list, name="best_of_n_list"),
    path(
        "modeling/best-of-n/<int:comparison_id>/",
        best_of_n_views.comparison_detail,
        name="best_of_n",
    ),
    path(
        "modeling/best-of-n/<int:comparison_id>/curves.png",
        best_of_n_views.comparison_png,
        name="best_of_n_png",
    ),
    path(
        "modeling/best-of-n/<int:comparison_id>/anyway/",
        best_of_n_views.comparison_anyway,
        name="best_of_n_anyway",
    ),
    path("modeling/orm/train/", best_of_n_views.train_orm, name="train_orm"),
    path("api/", include(run_router.urls)),
]

loop_router = DefaultRouter(trailing_slash=True)
loop_router.include_root_view = False
loop_router.register("generations", loop_api.GenerationViewSet, basename="generation-api")
loop_router.register("sampling-runs", loop_api.SamplingRunViewSet, basename="sampling-run-api")

loop_patterns = [
    path("generations/", loop_views.generation_list, name="generations"),
    path("generations/<int:generation>/", loop_views.generation_detail, name="generation"),
    path("generations/<int:generation>/retry/", loop_views.generation_retry, name="retry"),
    path("generations/<int:generation>/cancel/", loop_views.generation_cancel, name="cancel"),
    path("pool/sampling/", loop_views.sampling_list, name="sampling"),
    path("pool/sampling/estimate/", loop_views.sampling_estimate, name="sampling_estimate"),
    path("pool/sampling/<int:run_id>/resume/", loop_views.sampling_resume, name="sampling_resume"),
    path("pool/sampling/<int:run_id>/cancel/", loop_views.sampling_cancel, name="sampling_cancel"),
    path(
        "pool/sampling/<int:run_id>/compare/",
        best_of_n_views.compare_sampling_run,
        name="sampling_compare",
    ),
    path("api/", include(loop_router.urls)),
]

review_patterns = [
    path("modeling/review/", review_views.review_queue, name="queue"),
    path("modeling/review/batches/<int:batch_id>/score/", review_views.review_score, name="score"),
    path(
        "modeling/review/solutions/<int:solution_id>/",
        review_views.review_solution,
        name="solution",
    ),
]

prelabel_router = DefaultRouter(trailing_slash=True)
prelabel_router.include_root_view = False
prelabel_router.register("prelabel-runs", prelabel_api.PreLabelRunViewSet, basename="prelabel-api")

prelabel_patterns = [
    path("modeling/prelabel-runs/", prelabel_views.prelabel_list, name="list"),
    path(
        "modeling/prelabel-runs/<int:run_id>/cancel/",
        prelabel_views.prelabel_cancel,
        name="cancel",
    ),
    path(
        "modeling/prelabel-runs/<int:run_id>/resume/",
        prelabel_views.prelabel_resume,
        name="resume",
    ),
    path("api/", include(prelabel_router.urls)),
]

urlpatterns = [
    path("", include((loop_patterns, "modeling_loop"))),
    path("", include((run_patterns, "modeling_runs"))),
    path("", include((review_patterns, "modeling_review"))),
    path("", include((prelabel_patterns, "modeling_prelabel"))),
]
