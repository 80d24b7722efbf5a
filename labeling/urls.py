from django.urls import path

from labeling import views

app_name = "labeling"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("next/", views.claim, name="claim"),
    path("<int:labeling_id>/", views.labeling_page, name="labeling"),
    path("<int:labeling_id>/rate/", views.rate, name="rate"),
    path("<int:labeling_id>/undo/", views.undo, name="undo"),
    path("<int:labeling_id>/finish/", views.finish, name="finish"),
]

# Leads: dashboard, batches, labelers, adjudication, audit; guidelines for everyone.
urlpatterns += [
    path("guidelines/", views.guidelines, name="guidelines"),
    path("guidelines/edit/", views.guidelines_edit, name="guidelines_edit"),
    path("lead/", views.lead_home, name="lead_home"),
    path("lead/batches/new/", views.batch_edit, name="batch_new"),
    path("lead/batches/<int:batch_id>/", views.batch_dashboard, name="batch_dashboard"),
    path("lead/batches/<int:batch_id>/edit/", views.batch_edit, name="batch_edit"),
    path("lead/labelers/", views.labelers_page, name="labelers"),
    path("lead/labelers/<int:user_id>/", views.labeler_detail, name="labeler_detail"),
    path("lead/labelers/<int:user_id>/state/", views.labeler_state, name="labeler_state"),
    path("lead/adjudication/", views.adjudication_queue, name="adjudication_queue"),
    path("lead/adjudication/<int:solution_id>/", views.adjudicate, name="adjudicate"),
    path(
        "lead/labelings/<int:labeling_id>/history/", views.labeling_history, name="labeling_history"
    ),
]
