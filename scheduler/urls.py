"""Console URLs (namespaced ``console``).

Job ids contain slashes, so job routes match the id as a path (``jobs/alice/train/``); actions
follow a colon (``jobs/alice/train:cancel``), which job names may not contain, as in the API.
"""

from django.urls import path, re_path
from django.views.generic import RedirectView

from scheduler.views import budgets, fairness, history, jobs, manage, notifications, operations, queue, workers

app_name = "console"

# A job id without its leading slash, e.g. alice/train/eval. Never contains ':'.
JOB = r"(?P<job_id>[^:]+?)"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:queue"), name="home"),
    path("queue/", queue.queue, name="queue"),
    path("jobs/", jobs.jobs, name="jobs"),
    path("jobs/new/", jobs.submit, name="submit"),
    path("what-if/", jobs.what_if, name="what-if"),
    path("jobs:cancel", jobs.cancel_jobs, name="jobs-cancel"),
    re_path(rf"^jobs/{JOB}:cancel$", jobs.cancel_job, name="job-cancel"),
    re_path(rf"^jobs/{JOB}/$", jobs.job_detail, name="job"),
    path("logs/<int:task_pk>/<int:attempt>/", jobs.attempt_log, name="attempt-log"),
    path("budgets/", budgets.budgets, name="budgets"),
    re_path(r"^budgets/(?P<user>[^/:]+)/$", budgets.budget_detail, name="budget"),
    re_path(r"^budgets/(?P<user>[^/:]+):request-uplift$", budgets.request_uplift, name="request-uplift"),
    path("preemptions/", history.preemptions, name="preemptions"),
    path("fairness/", fairness.fairness, name="fairness"),
    path("workers/", workers.workers, name="workers"),
    re_path(r"^workers/(?P<name>[^/:]+):drain$", workers.drain, name="worker-drain"),
    re_path(r"^workers/(?P<name>[^/:]+):undrain$", workers.undrain, name="worker-undrain"),
    path("scheduler/", operations.scheduler_state, name="scheduler-state"),
    path("scheduler/tick", operations.run_tick, name="run-tick"),
    path("manage/", manage.budgets, name="manage-budgets"),
    path("manage/tiers/", manage.tiers, name="manage-tiers"),
    path("manage/uplifts/", manage.uplifts, name="manage-uplifts"),
    re_path(r"^manage/uplifts/(?P<pk>[0-9]+):(?P<verb>approve|deny)$", manage.decide_uplift, name="decide-uplift"),
    re_path(r"^manage/uplifts/(?P<pk>[0-9]+):preview$", manage.preview_uplift, name="preview-uplift"),
    path("manage/audit/", manage.audit, name="manage-audit"),
    path("settings/notifications/", notifications.notification_settings, name="notification-settings"),
]
