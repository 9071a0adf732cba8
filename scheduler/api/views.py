"""API views: thin. Reads go through the use cases' ``queries`` modules, writes through the use cases.

A view parses the query string (filter serializers), calls one query or one service, and renders
an output serializer. Errors are raised, never built here: ``scheduler.errors`` renders them.
Job ids contain slashes, so job routes take the id as a path and custom verbs follow a colon
(``jobs/alice/train:cancel``), as in Google's API design guide.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from iris_web.client_address import AccountThrottle, ClientAddressThrottle
from rest_framework.views import APIView

from scheduler import roles
from scheduler.access import api_tokens, mint_token, revoke_token
from scheduler.api import serializers as s
from scheduler.api.parsers import JSONParser
from scheduler.api.permissions import IsAdmin, IsOperator, IsResearcher, ReadAnyWriteAdmin, ReadAnyWriteOperator
from scheduler.budgets.queries import audit_entries, budget_view, budget_views, uplift_grants, user_is_known
from scheduler.budgets.writes import approve_uplift, deny_uplift, request_uplift, set_budget
from scheduler.core.bands import Band
from scheduler.errors import InvalidArgument, NotFound, PermissionDenied
from scheduler.execution.enrolment import mint_worker_credential
from scheduler.execution.queries import with_active_tasks, workers_by_name, workers_with_load
from scheduler.execution.workers import drain_worker, heartbeat_worker, register_worker, undrain_worker
from scheduler.jobs import listing
from scheduler.jobs.cancel import Selection, cancel_job, cancel_jobs, preview_cancel
from scheduler.jobs.explain import explain_job
from scheduler.jobs.feasibility import never_runs
from scheduler.jobs.queries import job_detail, jobs, task_counts
from scheduler.board.queue import queue_estimates, queue_rows, queue_selection
from scheduler.board.read import queue_index
from scheduler.jobs.request import normalize_job_id
from scheduler.jobs.submit import submit_job, submit_jobs
from scheduler.jobs.whatif import what_if
from scheduler.store import clock
from scheduler.tick.fairness import fairness_report
from scheduler.tick.queries import preemptions, recent_ticks
from scheduler.tick.run import run_tick_now

# Error statuses most operations can answer; views narrow or widen this.
COMMON_ERRORS = ("400", "401", "403", "404")


# Every operation that takes a body can also answer these: a body over DATA_UPLOAD_MAX_MEMORY_SIZE
# (413) and a body that is not JSON (415).
BODY_ERRORS = ("413", "415")


class IrisSchema(AutoSchema):
    """Adds the JSON error responses each view declares (``error_statuses``) to its operations,
    and those of a request body to every operation that takes one."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        statuses = list(getattr(self.view, "error_statuses", COMMON_ERRORS))
        if self.method in ("POST", "PUT", "PATCH"):
            statuses += [code for code in BODY_ERRORS if code not in statuses]
        for code in statuses:
            if code not in responses:
                responses[code] = self._get_response_for_code(s.ErrorSerializer, code, direction=direction)
        return responses


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


PAGE_PARAMETERS = [
    OpenApiParameter("page", int, description="1-based page number"),
    OpenApiParameter("page_size", int, description=f"items per page (default {Pagination.page_size}, at most 500)"),
]


CURSOR_PARAMETER = OpenApiParameter(
    "cursor", str, description="where the page starts: the opaque cursor of a next or previous link"
)


def positive_query_int(params, name: str, *, default: int) -> int:
    """A query parameter that must be a whole number of at least 1 (INVALID_ARGUMENT otherwise)."""
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"expected a whole number, got {raw!r}", field=name) from None
    if value < 1:
        raise InvalidArgument("must be at least 1", field=name)
    return value


def paginated(item: type[serializers.Serializer], name: str, **extra_fields) -> serializers.Serializer:
    """The ``{count, next, previous, results}`` envelope around ``item`` as a named schema component."""
    return inline_serializer(
        name=name,
        fields={
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
            **extra_fields,
        },
    )


def path_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.PATH, description=description)


JOB_ID = path_parameter("job_id", "job id without the leading slash, e.g. alice/train or alice/train/eval")


class IrisView(APIView):
    """Base of every API view: JSON bodies only, signed-in users, errors declared for the schema."""

    parser_classes = [JSONParser]
    permission_classes = [IsResearcher]
    schema = IrisSchema()
    error_statuses = COMMON_ERRORS

    def filters(self, serializer_class: type[serializers.Serializer]) -> dict:
        serializer = serializer_class(data=self.request.query_params)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def body(self) -> dict:
        data = self.request.data
        if not isinstance(data, dict):
            raise InvalidArgument("expected a JSON object as the request body")
        return data

    def paginate(self, items, serializer_class, **extra):
        paginator = Pagination()
        page = paginator.paginate_queryset(items, self.request, view=self)
        response = paginator.get_paginated_response(serializer_class(page, many=True).data)
        response.data.update(extra)
        return response


def band_or_none(value: str | None) -> Band | None:
    return Band.parse(value) if value else None


def job_name_from_path(job_id: str) -> str:
    """A job id from the URL; anything that cannot be a job id simply names no job."""
    try:
        return normalize_job_id(job_id, "job")
    except InvalidArgument:
        raise NotFound(f"job {job_id!r} does not exist", field="job") from None


# --- tokens and me --------------------------------------------------------------------------------


class TokenThrottle(ClientAddressThrottle):
    """Slows password guessing from one client address (the one IRIS_TRUSTED_PROXIES finds)."""

    rate = "30/minute"


class TokenAccountThrottle(AccountThrottle):
    """Slows guessing one account's password from many addresses."""

    rate = "30/minute"


class TokenView(IrisView):
    """``POST``: a password for a new token (anonymous, throttled). ``GET``: live tokens."""

    throttle_classes = [TokenThrottle, TokenAccountThrottle]
    error_statuses = ("400", "401", "403", "429")

    def get_authenticators(self):
        # Minting takes a password, not a token or a session; listing takes either.
        if self.request is not None and self.request.method == "POST":
            return []
        return super().get_authenticators()

    def get_permissions(self):
        if self.request is not None and self.request.method == "POST":
            return [AllowAny()]
        return super().get_permissions()

    def get_throttles(self):
        if self.request is not None and self.request.method == "POST":
            return super().get_throttles()
        return []

    @extend_schema(
        operation_id="tokens_create",
        summary="Exchange a username and password for a new API token (one per device or purpose)",
        request=s.TokenRequestSerializer,
        responses={200: s.TokenSerializer},
        auth=[],
        tags=["auth"],
    )
    def post(self, request):
        data = self.body()
        key, row = mint_token(data.get("username"), data.get("password"), data.get("name"), request=request._request)
        return Response({
            "token": key, "id": row.token_key, "name": row.name, "username": row.user.username,
            "role": roles.role_name(row.user), "expires_at": row.expiry,
        })

    @extend_schema(
        operation_id="tokens_list",
        summary="Your live API tokens (admins: anyone's, with ?user=NAME or ?user=*)",
        parameters=[s.TokenFilterSerializer],
        responses={200: s.TokenInfoSerializer(many=True)},
        tags=["auth"],
    )
    def get(self, request):
        f = self.filters(s.TokenFilterSerializer)
        rows = api_tokens(request.user, user=f.get("user"))
        current = getattr(request.auth, "digest", None)
        return Response(s.TokenInfoSerializer(rows, many=True, context={"current_digest": current}).data)


class TokenDetailView(IrisView):
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(operation_id="tokens_destroy", summary="Revoke an API token (its owner or an admin)",
                   parameters=[path_parameter("token_id", "the token's id, as listed")],
                   responses={204: None}, tags=["auth"])
    def delete(self, request, token_id: str):
        revoke_token(request.user, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CurrentTokenView(IrisView):
    error_statuses = ("401", "404")

    @extend_schema(operation_id="tokens_current_destroy", summary="Revoke the token this request is made with (iris logout)",
                   responses={204: None}, tags=["auth"])
    def delete(self, request):
        token_id = getattr(request.auth, "token_key", None)
        if token_id is None:
            raise NotFound("this request was not made with an API token")
        revoke_token(request.user, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(IrisView):
    error_statuses = ("401",)

    @extend_schema(operation_id="me_retrieve", summary="Who you are, your role and your budget",
                   responses={200: s.MeSerializer}, tags=["auth"])
    def get(self, request):
        budget = budget_view(request.user.username)
        return Response(
            s.MeSerializer({"username": request.user.username, "role": roles.role_name(request.user), "budget": budget}).data
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
            f"within the first {listing.MAX_OFFSET:,} jobs; its links are cursors too."
        ),
        parameters=[s.JobListParametersSerializer, CURSOR_PARAMETER, *PAGE_PARAMETERS],
        responses={200: paginated(s.JobSummarySerializer, "PaginatedJobList")},
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
        page = listing.page_of(qs.select_related("parent"), view, cursor=params.get("cursor") or None,
                               number=number, size=size)
        counts = task_counts([job.pk for job in page.jobs])
        for job in page.jobs:
            job.task_counts = counts[job.pk]
        url = remove_query_param(request.build_absolute_uri(), "page")
        return Response({
            "count": qs.count(),
            "next": replace_query_param(url, "cursor", page.next) if page.next else None,
            "previous": replace_query_param(url, "cursor", page.previous) if page.previous else None,
            "results": s.JobSummarySerializer(page.jobs, many=True).data,
        })

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
        return Response(s.JobSubmittedSerializer(job).data, status=status.HTTP_201_CREATED)


class JobsBatchView(IrisView):
    error_statuses = ("400", "401", "403", "404", "409", "429")

    @extend_schema(
        operation_id="jobs_create_many",
        summary="Submit a sweep: many jobs in one call, all or nothing",
        description=(
            "Body: {\"jobs\": [job, ...]}, each job as the body of POST jobs/, at most IRIS_MAX_JOBS_PER_BATCH "
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
        return Response({"count": len(jobs), "jobs": [s.batch_item_json(job) for job in jobs]},
                        status=status.HTTP_201_CREATED)


class JobDetailView(IrisView):
    error_statuses = ("401", "404")

    @extend_schema(operation_id="jobs_retrieve", summary="A job with its tasks and their attempts",
                   parameters=[JOB_ID], responses={200: s.JobDetailSerializer}, tags=["jobs"])
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
                {"id": outcome.job, "state": "killed", "killed_jobs": outcome.killed_jobs,
                 "killed_tasks": outcome.killed_tasks}
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
            "Body: {\"ids\": [job ids]} or {\"filter\": {user, band, effective, state, route, name, "
            "submitted_after, submitted_before}}, and \"dry_run\": true to only count. All or nothing: an unknown "
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
            raise InvalidArgument(f"unknown field(s) {', '.join(unknown)}; expected ids, filter, dry_run", field=unknown[0])
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
        return Response(s.BulkCancelSerializer({
            "dry_run": dry_run, "selected": outcome.selected[:LISTED_IDS], "selected_count": len(outcome.selected),
            "jobs": outcome.jobs, "tasks": outcome.tasks,
        }).data)


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
        entries = queue_selection(
            index, band=band_or_none(f.get("band")), user=f.get("user"), job=job, exact_job=True
        )
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
                {"task": e.task, "job": e.job, "user": e.user, "band": e.band, "position": e.position,
                 "band_pending": e.band_count,
                 "requested_band": e.requested if e.requested is not None else (row.job.band if row else None),
                 "resources": s.job_resources(row.job) if row else None,
                 "pending_reason": e.as_data(), "state": row.state if row else None,
                 "changed_since_tick": row is not None and row.state != "pending",
                 "estimated_start": estimate.data(), "estimated_start_reason": estimate.reason, "never": e.job in never}
            )
        response = paginator.get_paginated_response(s.QueueEntrySerializer(data, many=True).data)
        band_counts = {Band(rank).wire: n for rank, n in index.band_counts().items()}
        response.data.update({"tick": index.tick_pk, "tick_at": index.tick_at, "band_counts": band_counts})
        return response


# --- budgets --------------------------------------------------------------------------------------


class BudgetsView(IrisView):
    error_statuses = ("401",)

    @extend_schema(
        operation_id="budgets_list",
        summary="Every user with a budget row, an open grant or spend, with live spend",
        responses={200: s.BudgetSerializer(many=True)},
        tags=["budgets"],
    )
    def get(self, request):
        return Response(s.BudgetSerializer(budget_views(), many=True).data)


USER = path_parameter("user", "the budget identity (username)")


class BudgetView(IrisView):
    permission_classes = [ReadAnyWriteAdmin]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(operation_id="budgets_retrieve", summary="One user's budget, effective values and spend",
                   parameters=[USER], responses={200: s.BudgetSerializer}, tags=["budgets"])
    def get(self, request, user: str):
        if not user_is_known(user):
            raise NotFound(f"no user, budget, grant or job named {user!r}", field="user")
        return Response(s.BudgetSerializer(budget_view(user)).data)

    @extend_schema(
        operation_id="budgets_update",
        summary="Set a user's budget (admins); omitted values keep their current value",
        parameters=[USER],
        request=s.BudgetUpdateSerializer,
        responses={200: s.BudgetSerializer},
        tags=["budgets"],
    )
    def put(self, request, user: str):
        data = self.body()
        known = {"budget_limit", "max_band", "reason", "create_user_budget"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown field; known fields are {', '.join(sorted(known))}", field=unknown[0])
        row = set_budget(
            request.user, user, budget_limit=data.get("budget_limit"), max_band=data.get("max_band"),
            reason=data.get("reason"), create_user_budget=data.get("create_user_budget", False),
        )
        return Response(s.BudgetSerializer(budget_view(row.user_id)).data)


# --- uplift grants --------------------------------------------------------------------------------


class UpliftsView(IrisView):
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="uplifts_list",
        summary="Uplift grants, newest first (researchers see their own)",
        parameters=[s.UpliftFilterSerializer, *PAGE_PARAMETERS],
        responses={200: paginated(s.UpliftSerializer, "PaginatedUpliftList")},
        tags=["uplifts"],
    )
    def get(self, request):
        f = self.filters(s.UpliftFilterSerializer)
        user = f.get("user")
        if not roles.is_operator(request.user):
            if user and user != request.user.username:
                raise PermissionDenied("researchers see only their own uplifts", field="user")
            user = request.user.username
        return self.paginate(uplift_grants(user=user, state=f.get("state")), s.UpliftSerializer)

    @extend_schema(
        operation_id="uplifts_create",
        summary="Request a time-bounded raise of max_band and/or budget_limit",
        request=s.UpliftRequestSerializer,
        responses={201: s.UpliftSerializer},
        tags=["uplifts"],
    )
    def post(self, request):
        data = self.body()
        unknown = sorted(set(data) - {"user", "max_band", "budget_limit", "reason", "duration_seconds"})
        if unknown:
            raise InvalidArgument(
                "unknown field; known fields are user, max_band, budget_limit, reason, duration_seconds",
                field=unknown[0],
            )
        grant = request_uplift(
            request.user, user=data.get("user"), max_band=data.get("max_band"),
            budget_limit=data.get("budget_limit"), reason=data.get("reason"),
            duration_seconds=data.get("duration_seconds"),
        )
        return Response(s.UpliftSerializer(grant).data, status=status.HTTP_201_CREATED)


GRANT_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the grant's id")


class UpliftDecisionView(IrisView):
    permission_classes = [IsAdmin]
    error_statuses = ("400", "401", "403", "404", "409")
    approve = True

    def post(self, request, id: str):
        data = self.body()
        unknown = sorted(set(data) - {"duration_seconds", "note"} - ({"duration_seconds"} if not self.approve else set()))
        if unknown:
            raise InvalidArgument("unknown field; known fields are duration_seconds, note", field=unknown[0])
        if self.approve:
            grant = approve_uplift(request.user, id, duration_seconds=data.get("duration_seconds"),
                                            note=data.get("note"))
        else:
            grant = deny_uplift(request.user, id, note=data.get("note"))
        return Response(s.UpliftSerializer(grant).data)


class UpliftApproveView(UpliftDecisionView):
    approve = True

    @extend_schema(operation_id="uplifts_approve", summary="Approve a requested grant (admins): it starts now",
                   parameters=[GRANT_ID], request=s.UpliftDecisionSerializer, responses={200: s.UpliftSerializer},
                   tags=["uplifts"])
    def post(self, request, id: str):
        return super().post(request, id)


class UpliftDenyView(UpliftDecisionView):
    approve = False

    @extend_schema(operation_id="uplifts_deny", summary="Deny a requested grant (admins)",
                   parameters=[GRANT_ID], request=s.UpliftDecisionSerializer, responses={200: s.UpliftSerializer},
                   tags=["uplifts"])
    def post(self, request, id: str):
        return super().post(request, id)


class AuditView(IrisView):
    permission_classes = [IsAdmin]
    error_statuses = ("401", "403", "404")

    @extend_schema(operation_id="audit_list", summary="Budget and grant changes, newest first (admins)",
                   parameters=PAGE_PARAMETERS, responses={200: paginated(s.AuditEntrySerializer, "PaginatedAuditList")},
                   tags=["budgets"])
    def get(self, request):
        return self.paginate(audit_entries(), s.AuditEntrySerializer)


# --- workers --------------------------------------------------------------------------------------


WORKER = path_parameter("name", "the worker's name")


class WorkersView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403")

    @extend_schema(operation_id="workers_list", summary="Workers by name with capacity and active task counts",
                   parameters=PAGE_PARAMETERS, responses={200: paginated(s.WorkerSerializer, "PaginatedWorkerList")},
                   tags=["workers"])
    def get(self, request):
        paginator = Pagination()
        page = with_active_tasks(paginator.paginate_queryset(workers_by_name(), request, view=self))
        return paginator.get_paginated_response(s.WorkerSerializer(page, many=True).data)

    @extend_schema(
        operation_id="workers_register",
        summary="Register or update a worker by name (operators); 201 when new",
        request=s.WorkerRegisterSerializer,
        responses={200: s.WorkerSerializer, 201: s.WorkerSerializer},
        tags=["workers"],
    )
    def post(self, request):
        data = self.body()
        unknown = sorted(set(data) - {"name", "cpu", "memory", "device", "attributes", "backend"})
        if unknown:
            raise InvalidArgument("unknown field; known fields are name, cpu, memory, device, attributes, backend",
                                  field=unknown[0])
        worker, created = register_worker(
            request.user, name=data.get("name"), cpu=data.get("cpu"), memory=data.get("memory"),
            device=data.get("device"), attributes=data.get("attributes"), backend=data.get("backend") or "local",
        )
        worker = workers_with_load().get(pk=worker.pk)
        return Response(s.WorkerSerializer(worker).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class WorkerHeartbeatView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(operation_id="workers_heartbeat", summary="Record a worker's heartbeat (operators)",
                   parameters=[WORKER], request=s.HeartbeatSerializer, responses={200: s.WorkerSerializer},
                   tags=["workers"])
    def post(self, request, name: str):
        data = self.body()
        worker = heartbeat_worker(request.user, name, healthy=data.get("healthy", True))
        return Response(s.WorkerSerializer(worker).data)


class WorkerCredentialView(IrisView):
    permission_classes = [IsOperator]
    error_statuses = ("400", "401", "403")

    @extend_schema(operation_id="workers_credential",
                   summary="Mint a worker agent's credential, replacing the worker's earlier one (operators)",
                   parameters=[WORKER], request=None, responses={201: s.WorkerCredentialSerializer}, tags=["workers"])
    def post(self, request, name: str):
        credential = mint_worker_credential(request.user, name)
        return Response({"worker": name, "credential": credential}, status=status.HTTP_201_CREATED)


class WorkerDrainView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(operation_id="workers_drain", summary="Stop placing new work on a worker (operators)",
                   parameters=[WORKER], request=None, responses={200: s.WorkerSerializer}, tags=["workers"])
    def post(self, request, name: str):
        worker = drain_worker(request.user, name)
        return Response(s.WorkerSerializer(workers_with_load().get(pk=worker.pk)).data)


class WorkerUndrainView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(operation_id="workers_undrain", summary="Place new work on a drained worker again (operators)",
                   parameters=[WORKER], request=None, responses={200: s.WorkerSerializer}, tags=["workers"])
    def post(self, request, name: str):
        worker = undrain_worker(request.user, name)
        return Response(s.WorkerSerializer(workers_with_load().get(pk=worker.pk)).data)


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

    @extend_schema(operation_id="ticks_list", summary="Recent scheduling ticks, newest first",
                   parameters=[s.TickFilterSerializer], responses={200: s.TickSerializer(many=True)}, tags=["ticks"])
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

    @extend_schema(operation_id="fairness", summary="Fairness per band as of the newest tick, and the last 24 hours",
                   responses={200: s.FairnessSerializer}, tags=["ticks"])
    def get(self, request):
        report = fairness_report(timezone.now())
        return Response(s.FairnessSerializer({
            "tick": report.tick, "tick_at": report.tick_at, "bands": report.bands, "since": report.since,
            "lost_work": report.lost_work, "starvation_threshold": report.starvation_threshold,
            "starving": report.starving,
        }).data)


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


class NotFoundView(IrisView):
    """Any /api/v1/ path no route matches: a JSON 404 for every method (and no schema entry)."""

    permission_classes = [AllowAny]
    authentication_classes = []
    schema = None

    def initial(self, request, *args, **kwargs):
        raise NotFound(f"no API endpoint at {request.path}")
