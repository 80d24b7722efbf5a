"""Every route of the app: labeler and lead pages (`labeling:`), the researchers' page
(`research:`) and the REST API (route names `api-*` and the router's `<basename>-list/detail`),
all in a project (`urlpatterns`, under /p/<slug>/: stepwise.urls); a user's API tokens
(`tokens:`), their account, the projects' list and the API's schema outside any
(`global_urlpatterns`)."""

from csp.decorators import csp_exempt
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)
from rest_framework.routers import DefaultRouter

from labeling import api
from labeling.roles import IsMember
from labeling.views import alternatives, items, labeler, lead, people, research, tokens

labeler_patterns = [
    path("", labeler.queue, name="queue"),
    path("next/", labeler.claim, name="claim"),
    path("<int:labeling_id>/", labeler.labeling_page, name="labeling"),
    path("<int:labeling_id>/rate/", labeler.rate, name="rate"),
    path("<int:labeling_id>/undo/", labeler.undo, name="undo"),
    path("<int:labeling_id>/undo-to/", labeler.undo_to, name="undo_to"),
    path("<int:labeling_id>/revise/", labeler.revise, name="revise"),
    path("<int:labeling_id>/extend/", labeler.extend, name="extend"),
    path("<int:labeling_id>/finish/", labeler.finish, name="finish"),
    path("<int:labeling_id>/notes/", labeler.note, name="note"),
    path("<int:labeling_id>/skip/", labeler.skip, name="skip"),
    # The alternatives protocol: candidates rated, one chosen or the labeler's own step written.
    path("<int:labeling_id>/candidates/rate/", alternatives.rate_candidate, name="rate_candidate"),
    path(
        "<int:labeling_id>/candidates/choose/",
        alternatives.choose_candidate,
        name="choose_candidate",
    ),
    path("<int:labeling_id>/candidates/write/", alternatives.write_step, name="write_step"),
    path("<int:labeling_id>/candidates/again/", alternatives.ask_again, name="ask_again"),
    path("<int:labeling_id>/candidates/back/", alternatives.step_back, name="step_back"),
    # Rate the steps, after a −1 (PRM800K phase 2): the model's alternatives to the wrong step.
    path("<int:labeling_id>/alternatives/rate/", labeler.rate_after_error, name="rate_after_error"),
    path(
        "<int:labeling_id>/alternatives/again/",
        labeler.ask_again_after_error,
        name="ask_again_after_error",
    ),
    path("guidelines/", labeler.guidelines, name="guidelines"),
    path(
        "guidelines/versions/<int:version>/",
        labeler.guidelines_version,
        name="guidelines_version",
    ),
    # Leads: dashboard, batches, labelers, adjudication, audit, guidelines.
    path("guidelines/edit/", lead.guidelines_edit, name="guidelines_edit"),
    path("lead/", lead.lead_home, name="lead_home"),
    path("lead/batches/new/", lead.batch_edit, name="batch_new"),
    path("lead/batches/<int:batch_id>/", lead.batch_dashboard, name="batch_dashboard"),
    path("lead/batches/<int:batch_id>/edit/", lead.batch_edit, name="batch_edit"),
    path(
        "lead/batches/<int:batch_id>/machine-labels/",
        lead.batch_machine_labels,
        name="batch_machine_labels",
    ),
    path("lead/labelers/", lead.labelers_page, name="labelers"),
    path("lead/labelers/<int:user_id>/", lead.labeler_detail, name="labeler_detail"),
    path("lead/labelers/<int:user_id>/state/", lead.labeler_state, name="labeler_state"),
    path("lead/labelers/add/", people.labeler_add, name="labeler_add"),
    path("lead/members/", people.member_change, name="member_change"),
    path("lead/labelers/<int:user_id>/account/", people.labeler_account, name="labeler_account"),
    path("lead/adjudication/", lead.adjudication_queue, name="adjudication_queue"),
    path("lead/adjudication/<int:solution_id>/", lead.adjudicate, name="adjudicate"),
    path(
        "lead/labelings/<int:labeling_id>/history/", lead.labeling_history, name="labeling_history"
    ),
    # The item browser: a batch's solutions, filtered; one item with its notes and history.
    path("lead/batches/<int:batch_id>/items/", items.item_list, name="items"),
    path("lead/items/<int:solution_id>/", items.item_detail, name="item_detail"),
    path("lead/items/<int:solution_id>/notes/", items.item_reply, name="item_reply"),
]

research_patterns = [
    path("", research.index, name="index"),
    path("snapshots/", research.snapshot_list, name="snapshots"),
    path("snapshots/new/", research.snapshot_create, name="create"),
    path("snapshots/<int:snapshot_id>/download/", research.snapshot_download, name="download"),
    path("export/", research.export_now, name="export"),
]

# A one-time sign-in link (a lead added the labeler or reset their password), and choosing or
# changing one's password.
account_patterns = [
    path("sign-in/<str:uidb64>/<str:token>/", people.sign_in, name="sign_in"),
    path("password/", people.password, name="password"),
]

# Every signed-in user's own API tokens.
token_patterns = [
    path("", tokens.token_list, name="list"),
    path("<str:digest>/revoke/", tokens.token_revoke, name="revoke"),
]


class ProjectAPIRoot(DefaultRouter.APIRootView):
    """The project's API root: its endpoints, for its members."""

    permission_classes = [IsMember]


router = DefaultRouter()
router.APIRootView = ProjectAPIRoot
router.register("problems", api.ProblemViewSet, basename="problem")
router.register("batches", api.BatchViewSet, basename="batch")
router.register("solutions", api.SolutionViewSet, basename="solution")
router.register("labelings", api.LabelingViewSet, basename="labeling")
router.register("snapshots", api.SnapshotViewSet, basename="snapshot")

api_patterns: list[URLPattern | URLResolver] = [
    path("export/", api.ExportView.as_view(), name="api-export"),
    path("", include(router.urls)),
]

# The schema shows the project's endpoints under /p/{project}/api/ (stepwise.schema_urls).
schema_patterns: list[URLPattern | URLResolver] = [
    path("projects/", api.ProjectList.as_view(), name="api-projects"),
    path(
        "schema/",
        SpectacularAPIView.as_view(urlconf="stepwise.schema_urls"),
        name="api-schema",
    ),
    # The split view serves Swagger UI's start-up code as a script file, so the page passes the
    # CSP; Redoc's page is an inline bootstrap from drf-spectacular: the one page without a CSP.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path(
        "redoc/",
        csp_exempt()(SpectacularRedocView.as_view(url_name="api-schema")),
        name="api-redoc",
    ),
]

urlpatterns = [
    path("label/", include((labeler_patterns, "labeling"))),
    path("research/", include((research_patterns, "research"))),
    path("api/", include(api_patterns)),
]

global_urlpatterns = [
    path("account/tokens/", include((token_patterns, "tokens"))),
    path("account/", include((account_patterns, "account"))),
    path("api/", include(schema_patterns)),
]
