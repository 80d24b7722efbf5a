from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from labeling import api

router = DefaultRouter()
router.register("problems", api.ProblemViewSet, basename="problem")
router.register("batches", api.BatchViewSet, basename="batch")
router.register("solutions", api.SolutionViewSet, basename="solution")
router.register("labelings", api.LabelingViewSet, basename="labeling")
router.register("snapshots", api.SnapshotViewSet, basename="snapshot")

urlpatterns = [
    path("export/", api.ExportView.as_view(), name="api-export"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("", include(router.urls)),
]
