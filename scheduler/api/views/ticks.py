"""Ticks and the scheduler: preemption history, tick records, fairness, what-if."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from scheduler.api import serializers as s
from scheduler.api.permissions import ReadAnyWriteOperator
from scheduler.jobs.whatif import what_if
from scheduler.tick.fairness import fairness_report
from scheduler.tick.queries import preemptions, recent_ticks
from scheduler.tick.run import run_tick_now

from scheduler.api.views.base import IrisView, PAGE_PARAMETERS, band_or_none, paginated


# --- preemptions, ticks, what-if ------------------------------------------------------------------


class PreemptionsView(IrisView):
    error_statuses = ("400", "401", "404")

    @extend_schema(
        operation_id="preemptions_list",
        summary="Preemption history, newest first",
        parameters=[s.PreemptionFilterSerializer, *PAGE_PARAMETERS],
        responses={200: paginated(s.PreemptionSerializer, "PaginatedPreemptionList")},
        tags=["queue"],
    )
    def get(self, request):
        f = self.filters(s.PreemptionFilterSerializer)
        job = f.get("job")
        if job:
            job = "/" + job.strip("/")
        qs = preemptions(user=f.get("user"), band=band_or_none(f.get("band")), since=f.get("since"), job=job)
        return self.paginate(qs, s.PreemptionSerializer)


class TicksView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "409")

    @extend_schema(
        operation_id="ticks_list",
        summary="Recent scheduling ticks, newest first",
        parameters=[s.TickFilterSerializer],
        responses={200: s.TickSerializer(many=True)},
        tags=["ticks"],
    )
    def get(self, request):
        f = self.filters(s.TickFilterSerializer)
        return Response(s.TickSerializer(recent_ticks(f["limit"]), many=True).data)

    @extend_schema(
        operation_id="ticks_run",
        summary="Run one scheduling tick now (operators); 409 while another tick runs",
        request=None,
        responses={200: s.TickRunSerializer},
        tags=["ticks"],
    )
    def post(self, request):
        outcome = run_tick_now(request.user)
        return Response(s.TickRunSerializer(outcome).data)


class FairnessView(IrisView):
    error_statuses = ("401",)

    @extend_schema(
        operation_id="fairness",
        summary="Fairness per band as of the newest tick, and the last 24 hours",
        responses={200: s.FairnessSerializer},
        tags=["ticks"],
    )
    def get(self, request):
        report = fairness_report(timezone.now(), shares=False)
        return Response(
            s.FairnessSerializer(
                {
                    "tick": report.tick,
                    "tick_at": report.tick_at,
                    "bands": report.bands,
                    "since": report.since,
                    "lost_work": report.lost_work,
                    "starvation_threshold": report.starvation_threshold,
                    "starving": report.starving,
                }
            ).data
        )


class WhatIfView(IrisView):
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="what_if",
        summary="What would happen if this job were submitted now? Writes nothing",
        request=s.WhatIfRequestSerializer,
        responses={200: s.WhatIfSerializer},
        tags=["jobs"],
    )
    def post(self, request):
        answer = what_if(request.user, self.body())
        return Response(s.WhatIfSerializer(answer).data)
