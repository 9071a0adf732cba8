"""Console URLs (namespaced ``console``)."""

from django.urls import path

from scheduler import views

app_name = "console"

urlpatterns = [
    path("", views.scheduler_state, name="scheduler-state"),
]
