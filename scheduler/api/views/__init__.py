"""API views, one module per area: thin. Reads go through the use cases' ``queries`` modules, writes through the use cases.

A view parses the query string (filter serializers), calls one query or one service, and renders
an output serializer. Errors are raised, never built here: ``scheduler.foundation.errors`` renders them.
Job ids contain slashes, so job routes take the id as a path and custom verbs follow a colon
(``jobs/alice/train:cancel``), as in Google's API design guide.
"""

from scheduler.api.views.base import IrisView, NotFoundView
from scheduler.api.views.tokens import (
    CurrentTokenView,
    MeView,
    TokenAccountThrottle,
    TokenDetailView,
    TokenThrottle,
    TokenView,
)
from scheduler.api.views.jobs import (
    JobCancelView,
    JobDetailView,
    JobExplainView,
    JobsBatchView,
    JobsCancelView,
    JobsView,
)
from scheduler.api.views.queue import QueueView
from scheduler.api.views.budgets import (
    AuditView,
    BudgetView,
    BudgetsView,
    UpliftApproveView,
    UpliftDecisionView,
    UpliftDenyView,
    UpliftPreviewView,
    UpliftsView,
)
from scheduler.api.views.workers import (
    WorkerCredentialView,
    WorkerDrainView,
    WorkerHeartbeatView,
    WorkerUndrainView,
    WorkersView,
)
from scheduler.api.views.ticks import FairnessView, PreemptionsView, TicksView, WhatIfView
from scheduler.api.views.events import EventsView
from scheduler.api.views.notifications import NotificationSettingsView

__all__ = [
    "AuditView",
    "BudgetView",
    "BudgetsView",
    "CurrentTokenView",
    "EventsView",
    "FairnessView",
    "IrisView",
    "JobCancelView",
    "JobDetailView",
    "JobExplainView",
    "JobsBatchView",
    "JobsCancelView",
    "JobsView",
    "MeView",
    "NotFoundView",
    "NotificationSettingsView",
    "PreemptionsView",
    "QueueView",
    "TicksView",
    "TokenAccountThrottle",
    "TokenDetailView",
    "TokenThrottle",
    "TokenView",
    "UpliftApproveView",
    "UpliftDecisionView",
    "UpliftDenyView",
    "UpliftPreviewView",
    "UpliftsView",
    "WhatIfView",
    "WorkerCredentialView",
    "WorkerDrainView",
    "WorkerHeartbeatView",
    "WorkerUndrainView",
    "WorkersView",
]
