"""API serializers, every one with explicit fields.

Two kinds live here. *Output* serializers render rows and read models. *Request* serializers
describe request bodies and query strings for the OpenAPI schema; bodies are validated by the
use cases' parsers (``scheduler.inputs``, ``scheduler.jobs.request``), so the API, the console
and the admin share one set of rules and one wording of every message. Query-string filters are validated here.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.types import JobState, TaskState
from scheduler.inputs import MAX_BUDGET_POINTS, MAX_CPU_CORES
from scheduler.jobs.queries import task_placement
from scheduler.jobs.request import MAX_COMMAND_ITEM_CHARS, MAX_COMMAND_ITEMS, MAX_CONSTRAINT_VALUES
from scheduler.models import MAX_ID_LENGTH, UpliftGrant

# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
JOB_NAME_PATTERN = r"^/?[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*$"

BAND_WIRE = [b.wire for b in BANDS_IN_ORDER]
BAND_SCHEMA = {"type": "string", "enum": BAND_WIRE}
NULLABLE_BAND_SCHEMA = {"type": "string", "enum": [*BAND_WIRE, None], "nullable": True}
TASK_STATES = [s.value for s in TaskState]
JOB_STATES = [s.value for s in JobState]
GRANT_STATES = [s.value for s in UpliftGrant.State]
DEVICE_TYPES = ["cpu", "gpu", "tpu"]


# --- shared fields --------------------------------------------------------------------------------


def band_wire(value: Band | int) -> str:
    """A :class:`Band` (or a band column's rank) as its lower-case name. Not a parser: a
    string is refused (ValueError), so no use case can hand a view a band as rendered text."""
    return Band(value).wire


@extend_schema_field(BAND_SCHEMA)
class BandField(serializers.Field):
    """A band (a :class:`Band`, or a rank from a row) rendered as its lower-case name."""

    def to_representation(self, value):
        return band_wire(value)


@extend_schema_field(NULLABLE_BAND_SCHEMA)
class NullableBandField(serializers.Field):
    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return None if value is None else band_wire(value)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 0, "description": "bytes"},
            {"type": "string", "example": "16Gi", "description": "a size: 512Mi, 16Gi, 2G, 1.5Gi; at most 1024Pi",
             "pattern": r"^\s*\d{1,30}(\.\d{1,30})?\s*([kKmMgGtTpP][iI]?)?[bB]?\s*$"},
        ]
    }
)
class MemoryField(serializers.Field):
    """Bytes as an integer, or a size string (documentation only: the use cases parse it)."""


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_CONSTRAINT_VALUES},
        ],
        "nullable": True,
        "description": "a string for eq/ne, a list of strings for in, absent for exists",
    }
)
class ConstraintValueField(serializers.Field):
    def to_representation(self, value):
        return value


class ErrorSerializer(serializers.Serializer):
    """Every error response: a stable code, a human message, and details (``field`` when one is at fault)."""

    code = serializers.ChoiceField(
        choices=[
            "INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "FAILED_PRECONDITION",
            "RESOURCE_EXHAUSTED", "INTERNAL",
        ]
    )
    message = serializers.CharField()
    details = serializers.DictField(child=serializers.JSONField())


class DeviceSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=DEVICE_TYPES, default="cpu")
    variant = serializers.CharField(required=False, help_text="e.g. h100, v5p-8; gpu/tpu only")
    count = serializers.IntegerField(required=False, min_value=1, help_text="chips; gpu/tpu only")


def device_json(device_type: str, variant: str, count: int) -> dict:
    if device_type == "cpu":
        return {"type": "cpu"}
    return {"type": device_type, "variant": variant, "count": count}


class ConstraintSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="a worker attribute: device-type, device-variant, tpu-name, zone, ...")
    op = serializers.ChoiceField(choices=["eq", "ne", "in", "exists"], default="eq")
    value = ConstraintValueField(required=False)
    soft = serializers.BooleanField(default=False, help_text="soft constraints rank workers; hard ones filter")


# --- tokens and me --------------------------------------------------------------------------------


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"})
    name = serializers.CharField(required=False, max_length=100, help_text="the device or purpose, e.g. 'iris CLI on laptop'")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown this once; the server keeps only its hash")
    id = serializers.CharField(help_text="the token's public id (its first characters), to list and revoke it")
    name = serializers.CharField()
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=["admin", "operator", "researcher"])
    expires_at = serializers.DateTimeField()


class TokenInfoSerializer(serializers.Serializer):
    """A live API token as listed: never the token itself."""

    id = serializers.CharField(source="token_key")
    name = serializers.CharField()
    username = serializers.CharField(source="user.username")
    created_at = serializers.DateTimeField(source="created")
    expires_at = serializers.DateTimeField(source="expiry", allow_null=True)
    current = serializers.SerializerMethodField(help_text="the token this request was made with")

    def get_current(self, token) -> bool:
        return token.digest == self.context.get("current_digest")


class TokenFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="another user's tokens, or '*' for everyone's (admins)")


class WorkerCredentialSerializer(serializers.Serializer):
    worker = serializers.CharField()
    credential = serializers.CharField(help_text="shown this once: the agent sends it as 'Authorization: Worker <credential>'")


# --- uplift grants --------------------------------------------------------------------------------


class UpliftSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    user = serializers.CharField(source="user_id")
    state = serializers.ChoiceField(choices=GRANT_STATES)
    max_band = NullableBandField()
    budget_limit = serializers.IntegerField(allow_null=True, help_text="points; 0 = unlimited; null = not raised")
    reason = serializers.CharField()
    duration_seconds = serializers.IntegerField()
    requested_by = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_note = serializers.CharField()
    starts_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_requested_by(self, grant) -> str | None:
        return grant.requested_by.username if grant.requested_by else None

    @extend_schema_field({"type": "string", "nullable": True})
    def get_decided_by(self, grant) -> str | None:
        return grant.decided_by.username if grant.decided_by else None


class UpliftRequestSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="defaults to you; researchers ask only for themselves")
    max_band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    budget_limit = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_BUDGET_POINTS, help_text="points; 0 = unlimited"
    )
    reason = serializers.CharField()
    duration_seconds = serializers.IntegerField(min_value=60, max_value=90 * 24 * 3600)


class UpliftDecisionSerializer(serializers.Serializer):
    duration_seconds = serializers.IntegerField(
        required=False, min_value=60, max_value=90 * 24 * 3600, help_text="approve only; defaults to the requested duration"
    )
    note = serializers.CharField(required=False, allow_blank=True)


class UpliftFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, max_length=150)
    state = serializers.ChoiceField(choices=GRANT_STATES, required=False)


# --- budgets --------------------------------------------------------------------------------------


class BudgetSerializer(serializers.Serializer):
    """A user's budget: configured (row or defaults), effective now (with grants), live spend."""

    user = serializers.CharField()
    has_row = serializers.BooleanField(help_text="false: the cluster defaults apply")
    budget_limit = serializers.IntegerField(help_text="points; 0 = unlimited")
    max_band = BandField()
    effective_budget_limit = serializers.IntegerField(help_text="after active uplift grants; 0 = unlimited")
    effective_max_band = BandField()
    spend = serializers.IntegerField(help_text="points held by active tasks requested above BATCH, right now")
    effective_band = BandField(help_text="the band INTERACTIVE work of this user runs as now")
    over_budget = serializers.BooleanField()
    grants = UpliftSerializer(many=True, help_text="open grants: requested, or approved and not expired")


class BudgetUpdateSerializer(serializers.Serializer):
    budget_limit = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_BUDGET_POINTS, help_text="points; 0 = unlimited"
    )
    max_band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    reason = serializers.CharField(help_text="why; kept in the audit log")
    create_user_budget = serializers.BooleanField(
        required=False, default=False,
        help_text="set a budget for a user nobody knows yet (no account, budget, grant or job): on purpose only",
    )


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=["admin", "operator", "researcher"])
    budget = BudgetSerializer()


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    actor = serializers.CharField(source="actor_name")
    action = serializers.CharField()
    target = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


# --- jobs -----------------------------------------------------------------------------------------


class JobSubmitSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=MAX_ID_LENGTH - 8, validators=[RegexValidator(JOB_NAME_PATTERN)],
        help_text="'train' or '/alice/train'; with parent, one segment. Letters, digits and . _ - + @",
    )
    parent = serializers.CharField(required=False, allow_null=True, help_text="job id of the parent, e.g. /alice/train")
    priority = serializers.ChoiceField(
        choices=BAND_WIRE, required=False, allow_null=True,
        help_text="omitted: interactive for a root, the parent's band for a child",
    )
    system_reason = serializers.CharField(
        required=False, allow_blank=True, help_text="required for system: must name hero, finelog or iris work"
    )
    replicas = serializers.IntegerField(required=False, min_value=1, default=1)
    cpu = serializers.FloatField(
        required=False, min_value=0, max_value=MAX_CPU_CORES, default=1,
        help_text="cores per task: 0, or at least 0.001 (one millicore)",
    )
    memory = MemoryField(required=False, help_text="per task; default 1Gi")
    device = DeviceSerializer(required=False)
    group_by = serializers.CharField(
        required=False, allow_null=True, help_text="coscheduling attribute (e.g. tpu-name): all tasks or none"
    )
    constraints = ConstraintSerializer(many=True, required=False)
    scheduling_timeout_seconds = serializers.FloatField(
        required=False, allow_null=True, min_value=1, help_text="pending longer than this: unschedulable"
    )
    max_retries_preemption = serializers.IntegerField(required=False, min_value=0, default=100)
    max_retries_failure = serializers.IntegerField(required=False, min_value=0, default=0)
    command = serializers.ListField(
        # The schema asks every item to be non-blank; the server requires it of the program only.
        child=serializers.CharField(max_length=MAX_COMMAND_ITEM_CHARS, validators=[RegexValidator(r"\S")]),
        min_length=1, max_length=MAX_COMMAND_ITEMS,
        help_text="what each task runs; required, the first item (the program) not blank",
    )
    argv = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=MAX_COMMAND_ITEM_CHARS), required=False,
        max_length=MAX_COMMAND_ITEMS, help_text="the client's argv, kept for audit (a CLI sends it)",
    )


class JobBatchRequestSerializer(serializers.Serializer):
    """``POST jobs:batch``: a sweep, each item a ``POST jobs/`` body."""

    jobs = JobSubmitSerializer(
        many=True, min_length=1, max_length=settings.MAX_JOBS_PER_BATCH,
        help_text="the jobs, each as the body of POST jobs/ (at most IRIS_MAX_JOBS_PER_BATCH)",
    )


class JobBatchItemSerializer(serializers.Serializer):
    """A job of a batch's answer (the schema's; :func:`batch_item_json` renders it)."""

    id = serializers.CharField(help_text="the job id, e.g. /alice/sweep-3")
    user = serializers.CharField(help_text="its budget identity")
    band = serializers.SerializerMethodField(help_text="the requested band")
    replicas = serializers.IntegerField(help_text="its tasks, all pending")
    submitted_at_ms = serializers.IntegerField()
    warnings = serializers.ListField(child=serializers.CharField(), help_text="as for POST jobs/")

    def get_band(self, job) -> str:
        return Band(job.band).wire


def batch_item_json(job) -> dict:
    """:class:`JobBatchItemSerializer`'s rendering, written out: a thousand jobs per answer make
    DRF's per-field machinery an eighth of a batch's CPU (tests hold the two equal)."""
    return {"id": job.id, "user": job.user, "band": Band(job.band).wire, "replicas": job.replicas,
            "submitted_at_ms": job.submitted_at_ms, "warnings": list(job.warnings)}


class JobBatchSubmittedSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="jobs submitted: all of them")
    jobs = JobBatchItemSerializer(many=True, help_text="in the order given")


class WhatIfRequestSerializer(JobSubmitSerializer):
    user = serializers.CharField(required=False, help_text="ask as another user (admins and operators); default you")
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=MAX_COMMAND_ITEM_CHARS), required=False,
        max_length=MAX_COMMAND_ITEMS, help_text="optional here: what-if runs nothing",
    )


class ResourcesSerializer(serializers.Serializer):
    cpu = serializers.FloatField(help_text="cores")
    cpu_millicores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    device = DeviceSerializer()


def job_resources(job) -> dict:
    return {
        "cpu": job.cpu_millicores / 1000,
        "cpu_millicores": job.cpu_millicores,
        "memory_bytes": job.memory_bytes,
        "device": device_json(job.device_type, job.device_variant, job.device_count),
    }


class JobSummarySerializer(serializers.Serializer):
    id = serializers.CharField(source="name")
    user = serializers.CharField(help_text="budget identity: the root job's submitter")
    band = BandField(help_text="the requested band, fixed at submission")
    state = serializers.ChoiceField(choices=JOB_STATES)
    parent = serializers.SerializerMethodField()
    depth = serializers.IntegerField()
    replicas = serializers.IntegerField()
    resources = serializers.SerializerMethodField()
    group_by = serializers.CharField(allow_null=True)
    submitted_at_ms = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    task_counts = serializers.SerializerMethodField()
    effective_band = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_effective_band(self, job) -> str | None:
        """In lists only: the band the job's pending work is scheduled in now (jobs.listing)."""
        rank = getattr(job, "effective", None)
        return None if rank is None else Band(rank).wire

    @extend_schema_field({"type": "string", "nullable": True})
    def get_parent(self, job) -> str | None:
        return job.parent.name if job.parent_id else None

    @extend_schema_field(ResourcesSerializer)
    def get_resources(self, job) -> dict:
        return job_resources(job)

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}})
    def get_task_counts(self, job) -> dict:
        counts = getattr(job, "task_counts", None)
        if counts is None:
            counts = {}
            for task in job.tasks.all():
                counts[task.state] = counts.get(task.state, 0) + 1
        return dict(sorted(counts.items()))


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    worker = serializers.SerializerMethodField()
    state = serializers.ChoiceField(choices=TASK_STATES)
    band = BandField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True, help_text="empty while the worker may still run it")
    exit_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_worker(self, attempt) -> str | None:
        return attempt.worker.name if attempt.worker_id else None


class TaskSerializer(serializers.Serializer):
    id = serializers.SerializerMethodField()
    index = serializers.IntegerField()
    state = serializers.ChoiceField(choices=TASK_STATES)
    band = serializers.SerializerMethodField()
    worker = serializers.SerializerMethodField()
    preemption_count = serializers.IntegerField()
    failure_count = serializers.IntegerField()
    attempts = AttemptSerializer(many=True)

    def get_id(self, task) -> str:
        return f"{self.context['job_name']}/{task.index}"

    @extend_schema_field({**NULLABLE_BAND_SCHEMA, "description": "placed: stamped at assignment (effective band); "
                          "finished: its last attempt's; null while pending"})
    def get_band(self, task) -> str | None:
        band = task_placement(task)[0]
        return None if band is None else band.wire

    @extend_schema_field({"type": "string", "nullable": True, "description": "placed: its worker; finished: its "
                          "last attempt's; null while pending"})
    def get_worker(self, task) -> str | None:
        return task_placement(task)[1]


class JobDetailSerializer(JobSummarySerializer):
    constraints = ConstraintSerializer(many=True)
    scheduling_deadline_ms = serializers.IntegerField(allow_null=True)
    max_retries_preemption = serializers.IntegerField()
    max_retries_failure = serializers.IntegerField()
    command = serializers.ListField(child=serializers.CharField())
    submission_argv = serializers.ListField(child=serializers.CharField(), help_text="only when a CLI sent one")
    request = serializers.JSONField(help_text="the submission as validated, from any client")
    system_reason = serializers.CharField()
    submitted_by = serializers.SerializerMethodField()
    children = serializers.SerializerMethodField()
    tasks = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_submitted_by(self, job) -> str | None:
        return job.submitted_by.username if job.submitted_by_id else None

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_children(self, job) -> list[str]:
        return [child.name for child in job.children.all()]

    @extend_schema_field(TaskSerializer(many=True))
    def get_tasks(self, job) -> list[dict]:
        return TaskSerializer(job.tasks.all(), many=True, context={"job_name": job.name}).data


class NewTaskSerializer(TaskSerializer):
    """A task just written by its submission: pending, on no worker, without attempts."""

    attempts = serializers.SerializerMethodField()

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts(self, task) -> list[dict]:
        return []

    def get_band(self, task) -> str | None:
        return None

    def get_worker(self, task) -> str | None:
        return None


class JobSubmittedSerializer(JobDetailSerializer):
    """The answer to a submission: the job, and what its submitter should know about it.

    Rendered from the rows the submission just wrote (``submit_job`` leaves its tasks in
    ``job.new_tasks``), without reading them back: as ``GET`` of the job would answer, until a
    tick or a child changes it."""

    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="e.g. that no registered worker could run a task of it, naming the largest one",
    )

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}})
    def get_task_counts(self, job) -> dict:
        counts: dict[str, int] = {}
        for task in job.new_tasks:
            counts[task.state] = counts.get(task.state, 0) + 1
        return dict(sorted(counts.items()))

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_children(self, job) -> list[str]:
        return []

    @extend_schema_field(TaskSerializer(many=True))
    def get_tasks(self, job) -> list[dict]:
        return NewTaskSerializer(job.new_tasks, many=True, context={"job_name": job.name}).data


class JobFilterSerializer(serializers.Serializer):
    """The jobs table's filter (``scheduler.jobs.listing`` parses and validates it); documents
    the query parameters of ``GET jobs/`` and the ``filter`` of ``POST jobs:cancel``."""

    user = serializers.CharField(required=False, max_length=150)
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False, help_text="the requested band")
    effective = serializers.ChoiceField(choices=BAND_WIRE, required=False,
                                        help_text="the band the job's pending work is scheduled in now")
    state = serializers.ChoiceField(choices=JOB_STATES, required=False)
    route = serializers.ChoiceField(choices=["workers", "kubernetes", "unrouted"], required=False)
    name = serializers.CharField(required=False, max_length=150, help_text="substring of the job id, any case")
    submitted_after = serializers.CharField(required=False, help_text="YYYY-MM-DD or ISO 8601, inclusive")
    submitted_before = serializers.CharField(required=False,
                                             help_text="YYYY-MM-DD (the whole day included) or ISO 8601, exclusive")


class JobListParametersSerializer(JobFilterSerializer):
    sort = serializers.CharField(required=False, help_text="name|user|band|effective|state|route|tasks|submitted; "
                                                           "- first for descending (default -submitted)")


class BulkCancelRequestSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.CharField(), required=False)
    filter = JobFilterSerializer(required=False)
    dry_run = serializers.BooleanField(required=False, default=False, help_text="only count what would be cancelled")


class BulkCancelSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    selected = serializers.ListField(child=serializers.CharField(), help_text="the selected unfinished jobs (first 100)")
    selected_count = serializers.IntegerField()
    jobs = serializers.IntegerField(help_text="jobs killed (or to be killed), unfinished descendants included")
    tasks = serializers.IntegerField(help_text="unfinished tasks killed (or to be killed)")


class CancelSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the cancelled job")
    state = serializers.ChoiceField(choices=JOB_STATES)
    killed_jobs = serializers.ListField(child=serializers.CharField(), help_text="this job and its unfinished descendants")
    killed_tasks = serializers.IntegerField()


class DowngradeSerializer(serializers.Serializer):
    spend = serializers.IntegerField()
    limit = serializers.IntegerField()
    text = serializers.CharField()


class PendingReasonField(serializers.JSONField):
    """``{code, text, <the code's parameters>, downgrade?, band, position, band_pending, tick}``:
    a pending reason as data (docs/api.md lists every code and its parameters). ``text`` is
    rendered on the server from the rest (``core.explain.pending_text``); clients show it and
    never parse it."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", "a pending reason as data: {code, text, ...parameters} (see docs/api.md)")
        super().__init__(**kwargs)


class EstimatedStartSerializer(serializers.Serializer):
    """When a pending task will probably start (docs/estimates.md)."""

    p50 = serializers.CharField(help_text="ISO time: half the simulated futures start it by then")
    p90 = serializers.CharField(help_text="ISO time: the pessimistic (90th-percentile durations) start")
    method = serializers.ChoiceField(choices=["simulation", "wait_history"])
    as_of = serializers.CharField(help_text="ISO time of the cluster state the estimate was made from")
    late = serializers.BooleanField(
        help_text="the estimate made earlier passed its p90 with the task still waiting; this one is conditioned on "
                  "the wait so far (as of now)")
    passed_p90 = serializers.CharField(allow_null=True, help_text="ISO time: the p90 that passed, when `late`")


class ExplainTaskSerializer(serializers.Serializer):
    task = serializers.CharField()
    state = serializers.ChoiceField(choices=TASK_STATES, help_text="now")
    band = NullableBandField(help_text="queued band (as of the tick) if pending, stamped band if placed")
    requested_band = BandField()
    stamped_band = NullableBandField(help_text="the band stamped at assignment, if placed")
    worker = serializers.CharField(allow_null=True)
    position = serializers.IntegerField(allow_null=True, help_text="as of `tick`, 1-based in its band")
    band_pending = serializers.IntegerField(allow_null=True, help_text="tasks the tick left pending in that band")
    changed_since_tick = serializers.BooleanField(help_text="the tick queued it, and its state has changed since")
    pending_reason = PendingReasonField(allow_null=True)
    estimated_start = EstimatedStartSerializer(allow_null=True, help_text="null if not pending or not enough history")
    estimated_start_reason = serializers.CharField(allow_blank=True, help_text="why estimated_start is null")


class RequirementSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["constraint", "devices", "cpu", "memory", "group"])
    label = serializers.CharField()
    need = serializers.IntegerField(allow_null=True, help_text="millicores, bytes, devices or group size")
    workers_alone = serializers.IntegerField(help_text="healthy workers meeting it (for group: the largest group)")
    workers_with_previous = serializers.IntegerField(help_text="meeting it and every requirement above it")


class HolderSerializer(serializers.Serializer):
    user = serializers.CharField()
    band = BandField(help_text="stamped band of the holding tasks")
    tasks = serializers.IntegerField()
    preemptible = serializers.BooleanField(help_text="always true here: held_by lists only what the job may evict")


class HeldByOthersSerializer(serializers.Serializer):
    tasks = serializers.IntegerField(help_text="active tasks on the matching workers this job may not evict")
    users = serializers.ListField(child=serializers.CharField(), help_text="their users")


class LargestWorkerSerializer(serializers.Serializer):
    cpu_millicores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    devices = serializers.IntegerField()


class FeasibilitySerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["never", "scale_group", "not_now", "fits"])
    requirements = RequirementSerializer(many=True)
    healthy_workers = serializers.IntegerField()
    matching_workers = serializers.IntegerField()
    largest_worker = LargestWorkerSerializer(allow_null=True, help_text="the biggest worker meeting the constraints")
    scale_group = serializers.CharField(allow_null=True, help_text="a TPU scale group that could create a matching slice")
    band = BandField(help_text="the band it queues at")
    held_by = HolderSerializer(many=True, help_text="not_now: the top holders of the matching workers that this job "
                                                   "may evict (the preemption pass's rule: strictly lower band, and "
                                                   "the same kind of work: a CPU task evicts only CPU work)")
    held_by_others = HeldByOthersSerializer(allow_null=True, help_text="not_now: the rest of the top holders, which "
                                                                       "only free room by finishing")
    as_of_tick = serializers.IntegerField(
        allow_null=True, help_text="the tick the workers were read at (once per tick); null: read now, no tick yet")


class PriorityFactorSerializer(serializers.Serializer):
    factor = serializers.ChoiceField(choices=[
        "effective_band", "round_robin_turn", "own_tasks_ahead", "requested_band", "depth", "root_submitted_at_ms",
        "submitted_at_ms", "task_index"])
    label = serializers.CharField(help_text="the factor for people, e.g. 'Round-robin turn'")
    value = serializers.JSONField(allow_null=True, help_text="for programs: a band name, a count or epoch milliseconds")
    text = serializers.CharField(help_text="the value for people: a band, '2nd of 5 users', an ISO time with its age at the tick")
    detail = serializers.CharField(allow_null=True)
    users = serializers.ListField(child=serializers.DictField(), required=False,
                                  help_text="round_robin_turn: the band's users in turn order with their spend at the tick")


class PrioritySerializer(serializers.Serializer):
    tick = serializers.IntegerField()
    task = serializers.CharField(help_text="the job's first waiting task, whose place this explains")
    factors = PriorityFactorSerializer(many=True, help_text="in the order the scheduler applies them")
    position = serializers.IntegerField()
    band_pending = serializers.IntegerField()
    text = serializers.CharField(help_text="the resulting place, e.g. 'position 2 of 9 in BATCH as of tick 812'")


class DowngradeTextField(serializers.Field):
    """A downgrade record (``core.explain.Downgrade``) as its sentence."""

    def to_representation(self, value):
        return value.text()


@extend_schema_field({"type": "string", "nullable": True})
class NullableDowngradeTextField(DowngradeTextField):
    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


class BandSummarySerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["running", "pending", "ran"],
                                   help_text="running: placed, by stamped band; pending: by queued band; "
                                             "ran: finished, by the band of the last attempt")
    band = BandField()
    count = serializers.IntegerField()
    why = NullableDowngradeTextField(help_text="pending BATCH: the downgrade the tick queued it under")


class ExplainPreemptionSerializer(serializers.Serializer):
    victim = serializers.CharField()
    victim_band = BandField(help_text="the band the victim was stamped at when it was placed")
    victim_stamp = serializers.CharField(help_text="why it ran in that band")
    preemptor = serializers.CharField()
    preemptor_band = BandField()
    worker = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()
    reason = serializers.CharField()


class ExplainSerializer(serializers.Serializer):
    job = serializers.CharField()
    user = serializers.CharField()
    state = serializers.ChoiceField(choices=JOB_STATES)
    requested_band = BandField()
    effective_band = BandField(help_text="the band its pending tasks queue in now; for a finished job, ran_as "
                                         "(else the requested band)")
    ran_as = NullableBandField(help_text="a finished job: the band most of its tasks' last attempts ran as; "
                                         "null while unfinished or if nothing ran")
    downgrade = DowngradeSerializer(allow_null=True, help_text="null for a finished job: it ran as ran_as")
    spend = serializers.IntegerField(help_text="live")
    limit = serializers.IntegerField(help_text="effective budget limit, live; 0 = unlimited")
    spend_at_tick = serializers.IntegerField(allow_null=True, help_text="the spend the scheduler used at `tick`")
    limit_at_tick = serializers.IntegerField(allow_null=True, help_text="the limit the scheduler used at `tick`")
    position = serializers.IntegerField(allow_null=True, help_text="of its first pending task, in its band, as of `tick`")
    queued_band = NullableBandField(help_text="the band of that task, as of `tick`")
    band_pending = serializers.IntegerField(allow_null=True, help_text="tasks the tick left pending in that band")
    band_queue_length = serializers.IntegerField(allow_null=True, help_text="deprecated: same as band_pending")
    pending_reason = PendingReasonField(allow_null=True)
    estimated_start = EstimatedStartSerializer(allow_null=True, help_text="of its first pending task; null with a reason")
    estimated_start_reason = serializers.CharField(allow_blank=True, help_text="why estimated_start is null")
    estimated_start_text = serializers.CharField(allow_blank=True, help_text='e.g. "would start in about 20-45 min"')
    tick = serializers.IntegerField(allow_null=True, help_text="the tick the queue positions come from")
    bands = BandSummarySerializer(many=True, help_text="tasks per stamped (running) and queued (pending) band")
    bands_text = serializers.CharField()
    feasibility = FeasibilitySerializer(allow_null=True, help_text="can it ever run? (null for a finished job)")
    priority = PrioritySerializer(allow_null=True, help_text="the factors of its first waiting task's place (like sprio)")
    tasks = ExplainTaskSerializer(many=True)
    preemptions = ExplainPreemptionSerializer(many=True)
    what_would_change = serializers.CharField()


# --- queue ----------------------------------------------------------------------------------------


class QueueEntrySerializer(serializers.Serializer):
    task = serializers.CharField()
    job = serializers.CharField()
    user = serializers.CharField()
    band = BandField(help_text="effective band")
    requested_band = NullableBandField()
    position = serializers.IntegerField(help_text="1-based, within the band, as of `tick`")
    band_pending = serializers.IntegerField(help_text="tasks the tick left pending in the band")
    resources = ResourcesSerializer(allow_null=True, help_text="per task")
    pending_reason = PendingReasonField()
    state = serializers.ChoiceField(choices=TASK_STATES, allow_null=True, help_text="now (the queue is as of the tick)")
    changed_since_tick = serializers.BooleanField(help_text="its state now is not pending")
    estimated_start = EstimatedStartSerializer(allow_null=True, help_text="null with a reason when there is not enough history")
    estimated_start_reason = serializers.CharField(allow_blank=True)
    never = serializers.BooleanField(help_text="its job can never run on the cluster as it is (no healthy worker "
                                               "meets every requirement, even idle): the explain's verdict `never`")


class QueueFilterSerializer(serializers.Serializer):
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    user = serializers.CharField(required=False, max_length=150)
    job = serializers.CharField(required=False, max_length=255)


# --- workers --------------------------------------------------------------------------------------


class WorkerSerializer(serializers.Serializer):
    name = serializers.CharField()
    backend = serializers.CharField()
    healthy = serializers.BooleanField()
    draining = serializers.BooleanField()
    cpu = serializers.SerializerMethodField()
    cpu_millicores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    device = serializers.SerializerMethodField()
    attributes = serializers.DictField(child=serializers.CharField())
    registered_at = serializers.DateTimeField()
    last_heartbeat = serializers.DateTimeField(allow_null=True)
    active_tasks = serializers.SerializerMethodField()

    def get_cpu(self, worker) -> float:
        return worker.cpu_millicores / 1000

    @extend_schema_field(DeviceSerializer)
    def get_device(self, worker) -> dict:
        return device_json(worker.device_type, worker.device_variant, worker.device_count)

    @extend_schema_field({"type": "integer", "nullable": True})
    def get_active_tasks(self, worker) -> int | None:
        return getattr(worker, "active_tasks", None)


class WorkerRegisterSerializer(serializers.Serializer):
    name = serializers.CharField()
    cpu = serializers.FloatField(min_value=0, help_text="cores")
    memory = MemoryField()
    device = DeviceSerializer(required=False)
    attributes = serializers.DictField(child=serializers.CharField(), required=False)
    backend = serializers.CharField(required=False, default="local")


class HeartbeatSerializer(serializers.Serializer):
    healthy = serializers.BooleanField(required=False, default=True)


# --- preemptions and ticks ------------------------------------------------------------------------


class PreemptionSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    victim = serializers.SerializerMethodField()
    preemptor = serializers.SerializerMethodField()
    victim_band = BandField()
    preemptor_band = BandField()
    worker = serializers.SerializerMethodField()
    tick = serializers.IntegerField(source="tick_id", allow_null=True)
    reason = serializers.CharField()
    at = serializers.DateTimeField(source="created_at")

    def get_victim(self, event) -> str:
        return f"{event.victim.job.name}/{event.victim.index}"

    def get_preemptor(self, event) -> str:
        return f"{event.preemptor.job.name}/{event.preemptor.index}"

    @extend_schema_field({"type": "string", "nullable": True})
    def get_worker(self, event) -> str | None:
        return event.worker.name if event.worker_id else None


class PreemptionFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, max_length=150, help_text="the victim's user")
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False, help_text="the victim's band")
    since = serializers.DateTimeField(required=False, help_text="ISO 8601")
    job = serializers.CharField(required=False, max_length=255, help_text="the victim's job id")


class TickSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    started_at = serializers.DateTimeField()
    now_ms = serializers.IntegerField()
    duration_ms = serializers.FloatField()
    decide_ms = serializers.FloatField()
    pending = serializers.IntegerField(help_text="PENDING when the tick started")
    left_pending = serializers.IntegerField(help_text="tasks the tick left pending: the sum of its queue's band counts")
    assigned = serializers.IntegerField()
    preempted = serializers.IntegerField()
    expired = serializers.IntegerField()


class TickFilterSerializer(serializers.Serializer):
    limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=20)


class TickRunSerializer(serializers.Serializer):
    tick_id = serializers.IntegerField()
    assigned = serializers.IntegerField()
    preempted = serializers.IntegerField()
    expired = serializers.IntegerField()
    skipped_conflicts = serializers.IntegerField()
    duration_ms = serializers.FloatField()


# --- what-if --------------------------------------------------------------------------------------


class WhatIfErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class WhatIfBasisSerializer(serializers.Serializer):
    source = serializers.ChoiceField(choices=["tick", "live"], help_text=(
        "tick: the newest tick's free capacity and queue (spend and budget live); live: the whole "
        "live snapshot, before any tick"))
    tick = serializers.IntegerField(allow_null=True)
    tick_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="WhatIf")
class WhatIfSerializer(serializers.Serializer):
    accepted = serializers.BooleanField(help_text="the submission rules would accept it (see `never`: accepted is "
                                                  "not 'would run')")
    never = serializers.BooleanField(help_text="accepted, but it can never run on the cluster as it is "
                                               "(feasibility.verdict `never`)")
    error = WhatIfErrorSerializer(allow_null=True)
    job = serializers.CharField(allow_null=True, help_text="the id the job would get")
    requested_band = NullableBandField()
    effective_band = NullableBandField()
    spend = serializers.IntegerField(allow_null=True)
    limit = serializers.IntegerField(allow_null=True)
    position = serializers.IntegerField(allow_null=True, help_text="in its band's queue, if it would wait")
    would_place = serializers.BooleanField()
    worker = serializers.CharField(allow_null=True, help_text="where its first task would go")
    would_preempt = serializers.ListField(child=serializers.CharField())
    pending_reason = PendingReasonField(allow_null=True)
    feasibility = FeasibilitySerializer(allow_null=True, required=False)
    estimated_start = EstimatedStartSerializer(allow_null=True, required=False, help_text="no earlier than the task just ahead of it")
    estimated_start_text = serializers.CharField(required=False, help_text='e.g. "would start in about 20-45 min"')
    basis = WhatIfBasisSerializer(allow_null=True, required=False, help_text="what the answer stands on")



class FairnessUserSerializer(serializers.Serializer):
    user = serializers.CharField()
    running_value = serializers.IntegerField(help_text="resource value of the user's tasks running in the band after the tick")
    share = serializers.FloatField(help_text="running_value / the band's running value (0 to 1)")
    equal_share = serializers.FloatField(help_text="1 / the number of users with demand in the band")
    pending = serializers.IntegerField(help_text="the user's tasks the tick left pending in the band")
    over_budget = serializers.BooleanField(help_text="spend at the tick was over the user's limit")
    got_turn = serializers.BooleanField(help_text="at least one of the user's tasks was placed in the band this tick")


class SmallestWaitingSerializer(serializers.Serializer):
    job = serializers.CharField()
    user = serializers.CharField()
    task = serializers.CharField(help_text="its first pending task, whose reason this is")
    value = serializers.IntegerField(help_text="resource value of one task")
    pending = serializers.IntegerField()
    reason = serializers.DictField(help_text="the pending reason record (code, parameters) and its text")


class FairnessBandSerializer(serializers.Serializer):
    band = BandField()
    running_value = serializers.IntegerField()
    users = FairnessUserSerializer(many=True)
    smallest_waiting = SmallestWaitingSerializer(allow_null=True, help_text="the smallest job the tick left waiting")


class LostWorkSerializer(serializers.Serializer):
    user = serializers.CharField()
    preemptions = serializers.IntegerField()
    point_hours = serializers.FloatField(help_text="sum over evictions of resource value x hours the attempt had run")


class StarvingTaskSerializer(serializers.Serializer):
    task = serializers.CharField()
    job = serializers.CharField()
    user = serializers.CharField()
    band = NullableBandField(help_text="the band it was last stamped at")
    state = serializers.CharField()
    preemptions = serializers.IntegerField()
    history = serializers.CharField(help_text="the job's page: its preemptions suffered")


class FairnessSerializer(serializers.Serializer):
    tick = serializers.IntegerField(allow_null=True, help_text="the tick the per-band numbers are from")
    tick_at = serializers.DateTimeField(allow_null=True)
    bands = FairnessBandSerializer(many=True)
    since = serializers.DateTimeField(help_text="start of the 24-hour window of lost_work and starving")
    lost_work = LostWorkSerializer(many=True)
    starvation_threshold = serializers.IntegerField(help_text="starving: preempted more than this many times")
    starving = StarvingTaskSerializer(many=True)
