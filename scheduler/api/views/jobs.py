"""Jobs: submit (one or a sweep), list, detail, cancel, explain."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from scheduler.api import serializers as s
from scheduler.foundation.errors import InvalidArgument, NotFound
from scheduler.jobs import listing
from scheduler.jobs.columns import columns_wire
from scheduler.jobs.cancel import Selection, cancel_job, cancel_jobs, preview_cancel
from scheduler.jobs.explain import explain_job
from scheduler.jobs.queries import job_detail, jobs, task_counts
from scheduler.jobs.submit import submit_job, submit_jobs

from scheduler.api.views.base import (
    CURSOR_PARAMETER,
    IrisView,
    JOB_ID,
    PAGE_PARAMETERS,
    Pagination,
    job_name_from_path,
    paginated,
    positive_query_int,
)


# --- jobs -----------------------------------------------------------------------------------------


class JobsView(IrisView):
    error_statuses = ("400", "401", "403", "404", "409", "429")

    @extend_schema(
        operation_id="jobs_list",
        summary="List jobs (newest first unless sorted), filtered as the console's jobs table",
        description=(
            "Keyset pages: follow `next` and `previous`, whose opaque `cursor` starts the page after (or "
            "before) a row, so a deep page costs what the first does. `?page=N` (old links) still answers "
            f"within the first {listing.MAX_OFFSET:,} jobs; its links are cursors too. `count` is exact up to "
            f"{listing.COUNT_LIMIT:,}; past that it is {listing.COUNT_LIMIT:,} and `count_exact` is false."
        ),
        parameters=[s.JobListParametersSerializer, CURSOR_PARAMETER, *PAGE_PARAMETERS],
        responses={
            200: paginated(
                s.JobSummarySerializer,
                "PaginatedJobList",
                columns=s.JobColumnSerializer(many=True),
                count_exact=serializers.BooleanField(
                    help_text=f"false: more than `count` jobs match (counts stop at {listing.COUNT_LIMIT:,})"
                ),
            )
        },
        tags=["jobs"],
    )
    def get(self, request):
        params = self.request.query_params
        job_filter = listing.parse_filter(params)
        view = listing.parse_view({"sort": params.get("sort")})
        number = positive_query_int(params, "page", default=1)
        size = min(positive_query_int(params, "page_size", default=Pagination.page_size), Pagination.max_page_size)
        over = listing.over_budget_users()
        qs = listing.filtered_jobs(job_filter, over)
        page = listing.page_of(
            qs.select_related("parent"), view, cursor=params.get("cursor") or None, number=number, size=size
        )
        counts = task_counts([job.pk for job in page.jobs])
        for job in page.jobs:
            job.task_counts = counts[job.pk]
        counted = listing.count_of(qs)
        url = remove_query_param(request.build_absolute_uri(), "page")
        return Response(
            {
                "count": counted.n,
                "count_exact": counted.exact,
                "next": replace_query_param(url, "cursor", page.next) if page.next else None,
                "previous": replace_query_param(url, "cursor", page.previous) if page.previous else None,
                "columns": columns_wire(),
                "results": s.JobSummarySerializer(page.jobs, many=True).data,
            }
        )

    @extend_schema(
        operation_id="jobs_create",
        summary="Submit a job",
        description=(
            "Band rules: omitted priority is interactive for a root and the parent's band for a child; "
            "system and production are for admins (system needs a reason naming hero, finelog or iris); "
            "a band above your max_band is refused with PERMISSION_DENIED (never downgraded here). "
            "Limits give RESOURCE_EXHAUSTED."
        ),
        request=s.JobSubmitSerializer,
        responses={201: s.JobSubmittedSerializer},
        tags=["jobs"],
    )
    def post(self, request):
        job = submit_job(request.user, self.body())
        return Response(s.submitted_job_json(job), status=status.HTTP_201_CREATED)


class JobsBatchView(IrisView):
    error_statuses = ("400", "401", "403", "404", "409", "429")

    @extend_schema(
        operation_id="jobs_create_many",
        summary="Submit a sweep: many jobs in one call, all or nothing",
        description=(
            'Body: {"jobs": [job, ...]}, each job as the body of POST jobs/, at most IRIS_MAX_JOBS_PER_BATCH '
            "(default 1000). Every job is checked by the rules of POST jobs/ (bands, caps counted across the "
            "batch, ids unique in the batch); if any is refused nothing is written, and the error is the first "
            "refused item's, its message and details.field prefixed with jobs[<index>], details.index its index "
            "and details.errors every refused item (first 100). Accepted: 201 with the jobs in the order given."
        ),
        request=s.JobBatchRequestSerializer,
        responses={201: s.JobBatchSubmittedSerializer},
        tags=["jobs"],
    )
    def post(self, request):
        body = self.body()
        unknown = sorted(set(body) - {"jobs"})
        if unknown:
            raise InvalidArgument(f"unknown field(s) {', '.join(unknown)}; expected jobs", field=unknown[0])
        jobs = submit_jobs(request.user, body.get("jobs"))
        return Response(
            {"count": len(jobs), "jobs": [s.batch_item_json(job) for job in jobs]}, status=status.HTTP_201_CREATED
        )


class JobDetailView(IrisView):
    error_statuses = ("401", "404")

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="A job with its tasks and their attempts",
        parameters=[JOB_ID],
        responses={200: s.JobDetailSerializer},
        tags=["jobs"],
    )
    def get(self, request, job_id: str):
        name = job_name_from_path(job_id)
        job = job_detail(name)
        if job is None:
            raise NotFound(f"job {name} does not exist", field="job")
        return Response(s.JobDetailSerializer(job).data)


class JobCancelView(IrisView):
    error_statuses = ("401", "403", "404", "409")

    @extend_schema(
        operation_id="jobs_cancel",
        summary="Cancel a job and its unfinished descendants (owner or admin)",
        parameters=[JOB_ID],
        request=None,
        responses={200: s.CancelSerializer},
        tags=["jobs"],
    )
    def post(self, request, job_id: str):
        outcome = cancel_job(request.user, job_name_from_path(job_id))
        return Response(
            s.CancelSerializer(
                {
                    "id": outcome.job,
                    "state": "killed",
                    "killed_jobs": outcome.killed_jobs,
                    "killed_tasks": outcome.killed_tasks,
                }
            ).data
        )


# The most job ids a bulk-cancel answer lists; ``selected_count`` always has the full number.
LISTED_IDS = 100


class JobsCancelView(IrisView):
    error_statuses = ("400", "401", "403", "404", "409")

    @extend_schema(
        operation_id="jobs_cancel_many",
        summary="Cancel many jobs: a list of ids or every job a filter matches (own jobs; any for admins)",
        description=(
            'Body: {"ids": [job ids]} or {"filter": {user, band, effective, state, route, name, '
            'submitted_after, submitted_before}}, and "dry_run": true to only count. All or nothing: an unknown '
            "id, another user's job (for a researcher), an unknown filter key or a bad value cancels nothing. "
            "Finished jobs in the selection are left as they are."
        ),
        request=s.BulkCancelRequestSerializer,
        responses={200: s.BulkCancelSerializer},
        tags=["jobs"],
    )
    def post(self, request):
        body = self.body()
        unknown = sorted(set(body) - {"ids", "filter", "dry_run"})
        if unknown:
            raise InvalidArgument(
                f"unknown field(s) {', '.join(unknown)}; expected ids, filter, dry_run", field=unknown[0]
            )
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise InvalidArgument("must be true or false", field="dry_run")
        if "filter" in body:
            if not isinstance(body["filter"], dict):
                raise InvalidArgument("must be an object of filter fields", field="filter")
            if "ids" in body:
                raise InvalidArgument("give ids or a filter, not both", field="ids")
            selection = Selection(filter=listing.parse_filter(body["filter"], strict=True))
        else:
            ids = body.get("ids")
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise InvalidArgument("must be a list of job ids (or give a filter)", field="ids")
            selection = Selection(names=tuple(ids))
        outcome = (preview_cancel if dry_run else cancel_jobs)(request.user, selection)
        return Response(
            s.BulkCancelSerializer(
                {
                    "dry_run": dry_run,
                    "selected": outcome.selected[:LISTED_IDS],
                    "selected_count": len(outcome.selected),
                    "jobs": outcome.jobs,
                    "tasks": outcome.tasks,
                }
            ).data
        )


class JobExplainView(IrisView):
    error_statuses = ("401", "404")

    @extend_schema(
        operation_id="jobs_explain",
        summary="Why a job runs or waits where it does: bands with the numbers, queue position, preemptions",
        parameters=[JOB_ID],
        responses={200: s.ExplainSerializer},
        tags=["jobs"],
    )
    def get(self, request, job_id: str):
        name = job_name_from_path(job_id)
        job = jobs().filter(name=name).first()
        if job is None:
            raise NotFound(f"job {name} does not exist", field="job")
        return Response(s.ExplainSerializer(explain_job(job)).data)
