"""``GET /api/v1/scheduler/status``: the scheduler's state for operators (``iris scheduler status``)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from scheduler.api.permissions import IsOperator
from scheduler.api.views import IrisView
from scheduler.observability.status import scheduler_status


class SchedulerStatusView(IrisView):
    permission_classes = [IsOperator]
    error_statuses = ("401", "403")

    @extend_schema(
        operation_id="scheduler_status",
        summary="Newest ticks, leases, outbox by state, workers by health, pending per band, readiness (operators)",
        responses={200: OpenApiTypes.OBJECT},
        tags=["ticks"],
    )
    def get(self, request):
        return Response(scheduler_status())
