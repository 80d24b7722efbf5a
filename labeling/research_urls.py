from django.urls import path

from labeling import research_views

app_name = "research"

urlpatterns = [
    path("", research_views.index, name="index"),
    path("snapshots/", research_views.snapshot_list, name="snapshots"),
    path("snapshots/new/", research_views.snapshot_create, name="create"),
    path(
        "snapshots/<int:snapshot_id>/download/", research_views.snapshot_download, name="download"
    ),
    path("export/", research_views.export_now, name="export"),
]
