"""Generation pages under /generations/ and the API under /api/generations/ (one include)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from modeling import api_loop, views_loop

app_name = "modeling_loop"

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("generations", api_loop.GenerationViewSet, basename="generation-api")

urlpatterns = [
    path("generations/", views_loop.generation_list, name="generations"),
    path("generations/<int:generation>/", views_loop.generation_detail, name="generation"),
    path("generations/<int:generation>/retry/", views_loop.generation_retry, name="retry"),
    path("generations/<int:generation>/cancel/", views_loop.generation_cancel, name="cancel"),
    path("api/", include(router.urls)),
]
