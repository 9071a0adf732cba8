"""API routes under /api/v1/ (namespaced ``api``).

Job ids contain slashes, so their routes match the id as a path; custom verbs follow a colon,
which job names may not contain. Anything unmatched gets a JSON 404.
"""

from django.urls import path, re_path

from scheduler.api import status, views

app_name = "api"

# A job id without its leading slash, e.g. alice/train/eval. Never contains ':'.
JOB = r"(?P<job_id>[^:]+)"

urlpatterns = [
    path("tokens/", views.TokenView.as_view(), name="tokens"),
    path("tokens/current", views.CurrentTokenView.as_view(), name="token-current"),
    re_path(r"^tokens/(?P<token_id>[0-9a-f]{1,32})$", views.TokenDetailView.as_view(), name="token"),
    path("me/", views.MeView.as_view(), name="me"),
    path("me/notifications/", views.NotificationSettingsView.as_view(), name="me-notifications"),
    path("jobs/", views.JobsView.as_view(), name="jobs"),
    path("jobs:cancel", views.JobsCancelView.as_view(), name="jobs-cancel"),
    path("jobs:batch", views.JobsBatchView.as_view(), name="jobs-batch"),
    re_path(rf"^jobs/{JOB}:cancel$", views.JobCancelView.as_view(), name="job-cancel"),
    re_path(rf"^jobs/{JOB}:explain$", views.JobExplainView.as_view(), name="job-explain"),
    re_path(rf"^jobs/{JOB}$", views.JobDetailView.as_view(), name="job"),
    path("queue/", views.QueueView.as_view(), name="queue"),
    path("budgets/", views.BudgetsView.as_view(), name="budgets"),
    re_path(r"^budgets/(?P<user>[^/:]+)$", views.BudgetView.as_view(), name="budget"),
    path("uplifts/", views.UpliftsView.as_view(), name="uplifts"),
    re_path(r"^uplifts/(?P<id>[0-9]+):approve$", views.UpliftApproveView.as_view(), name="uplift-approve"),
    re_path(r"^uplifts/(?P<id>[0-9]+):deny$", views.UpliftDenyView.as_view(), name="uplift-deny"),
    re_path(r"^uplifts/(?P<id>[0-9]+):preview$", views.UpliftPreviewView.as_view(), name="uplift-preview"),
    path("audit/", views.AuditView.as_view(), name="audit"),
    path("workers/", views.WorkersView.as_view(), name="workers"),
    re_path(r"^workers/(?P<name>[^/:]+):heartbeat$", views.WorkerHeartbeatView.as_view(), name="worker-heartbeat"),
    re_path(r"^workers/(?P<name>[^/:]+):credential$", views.WorkerCredentialView.as_view(), name="worker-credential"),
    re_path(r"^workers/(?P<name>[^/:]+):drain$", views.WorkerDrainView.as_view(), name="worker-drain"),
    re_path(r"^workers/(?P<name>[^/:]+):undrain$", views.WorkerUndrainView.as_view(), name="worker-undrain"),
    path("preemptions/", views.PreemptionsView.as_view(), name="preemptions"),
    path("ticks/", views.TicksView.as_view(), name="ticks"),
    path("fairness/", views.FairnessView.as_view(), name="fairness"),
    path("what-if/", views.WhatIfView.as_view(), name="what-if"),
    path("events/", views.EventsView.as_view(), name="events"),
    path("scheduler/status", status.SchedulerStatusView.as_view(), name="scheduler-status"),
    re_path(r"^.*$", views.NotFoundView.as_view(), name="not-found"),
]
