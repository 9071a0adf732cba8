"""The queue as the newest tick published it: ``queue/``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from scheduler.api import serializers as s
from scheduler.core.bands import Band
from scheduler.foundation.errors import InvalidArgument
from scheduler.jobs.feasibility import never_runs
from scheduler.board.queue import queue_estimates, queue_rows, queue_selection
from scheduler.board.read import queue_index
from scheduler.jobs.request import normalize_job_id
from scheduler.store import clock

from scheduler.api.views.base import IrisView, PAGE_PARAMETERS, Pagination, band_or_none, paginated


# --- queue ----------------------------------------------------------------------------------------


class QueueView(IrisView):
    error_statuses = ("400", "401", "404")

    @extend_schema(
        operation_id="queue_list",
        summary="Pending tasks by effective band in scheduling order (as of the newest tick)",
        parameters=[s.QueueFilterSerializer, *PAGE_PARAMETERS],
        responses={
            200: paginated(
                s.QueueEntrySerializer,
                "PaginatedQueue",
                tick=serializers.IntegerField(allow_null=True, help_text="the tick the order comes from"),
                tick_at=serializers.DateTimeField(allow_null=True),
                band_counts=serializers.DictField(child=serializers.IntegerField(), help_text="pending tasks per band"),
            )
        },
        tags=["queue"],
    )
    def get(self, request):
        f = self.filters(s.QueueFilterSerializer)
        job = f.get("job")
        if job:
            try:
                job = normalize_job_id(job, "job")
            except InvalidArgument:
                job = "/" + job.strip("/")  # cannot be a job id: matches nothing
        index = queue_index()
        entries = queue_selection(index, band=band_or_none(f.get("band")), user=f.get("user"), job=job, exact_job=True)
        paginator = Pagination()
        page = paginator.paginate_queryset(entries, request, view=self)
        rows = queue_rows(page)
        estimates = queue_estimates(page, clock.now_ms())
        tick_key = (index.tick_pk, index.tick_now_ms) if index.tick_pk is not None else None
        never = never_runs({t.job.name: t.job for t in rows.values()}.values(), tick_key)
        data = []
        for e in page:
            row = rows.get(e.task)
            estimate = estimates[e.task]
            data.append(
                {
                    "task": e.task,
                    "job": e.job,
                    "user": e.user,
                    "band": e.band,
                    "position": e.position,
                    "band_pending": e.band_count,
                    "requested_band": e.requested if e.requested is not None else (row.job.band if row else None),
                    "resources": s.job_resources(row.job) if row else None,
                    "pending_reason": e.as_data(),
                    "state": row.state if row else None,
                    "changed_since_tick": row is not None and row.state != "pending",
                    "estimated_start": estimate.data(),
                    "estimated_start_reason": estimate.reason,
                    "never": e.job in never,
                }
            )
        response = paginator.get_paginated_response(s.QueueEntrySerializer(data, many=True).data)
        band_counts = {Band(rank).wire: n for rank, n in index.band_counts().items()}
        response.data.update({"tick": index.tick_pk, "tick_at": index.tick_at, "band_counts": band_counts})
        return response
