"""Jobs: submissions (one or a sweep), lists, detail, cancel, and explain."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.core.bands import Band
from scheduler.foundation.inputs import MAX_CPU_CORES
from scheduler.jobs.columns import KINDS
from scheduler.jobs.queries import task_placement
from scheduler.jobs.request import MAX_COMMAND_ITEM_CHARS, MAX_COMMAND_ITEMS
from scheduler.models import MAX_ID_LENGTH

# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
from scheduler.api.serializers.fields import (
    BAND_WIRE,
    BandField,
    ConstraintSerializer,
    DeviceSerializer,
    JOB_NAME_PATTERN,
    JOB_STATES,
    MemoryField,
    NULLABLE_BAND_SCHEMA,
    NullableBandField,
    TASK_STATES,
    device_json,
)


# --- jobs -----------------------------------------------------------------------------------------


class JobSubmitSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=MAX_ID_LENGTH - 8,
        validators=[RegexValidator(JOB_NAME_PATTERN)],
        help_text="'train' or '/alice/train'; with parent, one segment. Letters, digits and . _ - + @",
    )
    parent = serializers.CharField(required=False, allow_null=True, help_text="job id of the parent, e.g. /alice/train")
    priority = serializers.ChoiceField(
        choices=BAND_WIRE,
        required=False,
        allow_null=True,
        help_text="omitted: interactive for a root, the parent's band for a child",
    )
    system_reason = serializers.CharField(
        required=False, allow_blank=True, help_text="required for system: must name hero, finelog or iris work"
    )
    replicas = serializers.IntegerField(required=False, min_value=1, default=1)
    cpu = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=MAX_CPU_CORES,
        default=1,
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
        min_length=1,
        max_length=MAX_COMMAND_ITEMS,
        help_text="what each task runs; required, the first item (the program) not blank",
    )
    argv = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=MAX_COMMAND_ITEM_CHARS),
        required=False,
        max_length=MAX_COMMAND_ITEMS,
        help_text="the client's argv, kept for audit (a CLI sends it)",
    )


class JobBatchRequestSerializer(serializers.Serializer):
    """``POST jobs:batch``: a sweep, each item a ``POST jobs/`` body."""

    jobs = JobSubmitSerializer(
        many=True,
        min_length=1,
        max_length=settings.MAX_JOBS_PER_BATCH,
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
    return {
        "id": job.id,
        "user": job.user,
        "band": Band(job.band).wire,
        "replicas": job.replicas,
        "submitted_at_ms": job.submitted_at_ms,
        "warnings": list(job.warnings),
    }


class JobBatchSubmittedSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="jobs submitted: all of them")
    jobs = JobBatchItemSerializer(many=True, help_text="in the order given")


class WhatIfRequestSerializer(JobSubmitSerializer):
    user = serializers.CharField(required=False, help_text="ask as another user (admins and operators); default you")
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=MAX_COMMAND_ITEM_CHARS),
        required=False,
        max_length=MAX_COMMAND_ITEMS,
        help_text="optional here: what-if runs nothing",
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


class JobColumnSerializer(serializers.Serializer):
    """One column of the jobs table (``jobs.columns``), in its order: what ``iris job list`` shows."""

    key = serializers.CharField(help_text="the column's name, and its ?sort= value where it sorts")
    label = serializers.CharField()
    short = serializers.CharField(help_text="the header where there is less room (the CLI's, in capitals)")
    field = serializers.CharField(help_text="the field of each result the column shows")
    kind = serializers.ChoiceField(choices=KINDS, help_text="how to render the field")


class JobSummarySerializer(serializers.Serializer):
    id = serializers.CharField(source="name")
    user = serializers.CharField(help_text="budget identity: the root job's submitter")
    band = BandField(help_text="the requested band, fixed at submission")
    state = serializers.ChoiceField(choices=JOB_STATES)
    route = serializers.CharField(help_text='where its tasks run: "workers" or an admitting backend; "" until routed')
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

    @extend_schema_field(
        {
            **NULLABLE_BAND_SCHEMA,
            "description": "placed: stamped at assignment (effective band); "
            "finished: its last attempt's; null while pending",
        }
    )
    def get_band(self, task) -> str | None:
        band = task_placement(task)[0]
        return None if band is None else band.wire

    @extend_schema_field(
        {
            "type": "string",
            "nullable": True,
            "description": "placed: its worker; finished: its last attempt's; null while pending",
        }
    )
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


# DRF's own rendering of a time (ISO 8601, UTC as "Z"), used without building a serializer.
_DATETIME = serializers.DateTimeField()


def _constraint_json(constraint: dict) -> dict:
    """:class:`ConstraintSerializer`'s rendering of a stored constraint (``value`` only when set)."""
    rendered = {"key": str(constraint["key"]), "op": constraint.get("op", "eq")}
    if "value" in constraint:
        rendered["value"] = constraint["value"]
    rendered["soft"] = bool(constraint.get("soft", False))
    return rendered


def submitted_job_json(job) -> dict:
    """:class:`JobSubmittedSerializer`'s rendering, written out, keys in its order: the answer to
    every ``POST jobs/``, where building the serializer (its fields deep-copied per instance,
    then its nested task serializer) was a sixth of the web process's CPU per submission (issue
    26). Tests hold the two equal, key order included, for jobs of every shape."""
    tasks = job.new_tasks
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.state] = counts.get(task.state, 0) + 1
    name = job.name
    return {
        "id": str(name),
        "user": str(job.user),
        "band": Band(job.band).wire,
        "state": job.state,
        "route": str(job.route),
        "parent": job.parent.name if job.parent_id else None,
        "depth": int(job.depth),
        "replicas": int(job.replicas),
        "resources": job_resources(job),
        "group_by": None if job.group_by is None else str(job.group_by),
        "submitted_at_ms": int(job.submitted_at_ms),
        "created_at": _DATETIME.to_representation(job.created_at),
        "finished_at": None if job.finished_at is None else _DATETIME.to_representation(job.finished_at),
        "task_counts": dict(sorted(counts.items())),
        "effective_band": None,
        "constraints": [_constraint_json(c) for c in job.constraints],
        "scheduling_deadline_ms": None if job.scheduling_deadline_ms is None else int(job.scheduling_deadline_ms),
        "max_retries_preemption": int(job.max_retries_preemption),
        "max_retries_failure": int(job.max_retries_failure),
        "command": [str(item) for item in job.command],
        "submission_argv": [str(item) for item in job.submission_argv],
        "request": job.request,
        "system_reason": str(job.system_reason),
        "submitted_by": job.submitted_by.username if job.submitted_by_id else None,
        "children": [],
        "tasks": [
            {
                "id": f"{name}/{task.index}",
                "index": int(task.index),
                "state": task.state,
                "band": None,
                "worker": None,
                "preemption_count": int(task.preemption_count),
                "failure_count": int(task.failure_count),
                "attempts": [],
            }
            for task in tasks
        ],
        "warnings": [str(w) for w in job.warnings],
    }


class JobFilterSerializer(serializers.Serializer):
    """The jobs table's filter (``scheduler.jobs.listing`` parses and validates it); documents
    the query parameters of ``GET jobs/`` and the ``filter`` of ``POST jobs:cancel``."""

    user = serializers.CharField(required=False, max_length=150)
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False, help_text="the requested band")
    effective = serializers.ChoiceField(
        choices=BAND_WIRE, required=False, help_text="the band the job's pending work is scheduled in now"
    )
    state = serializers.ChoiceField(choices=JOB_STATES, required=False)
    route = serializers.ChoiceField(choices=["workers", "kubernetes", "unrouted"], required=False)
    name = serializers.CharField(required=False, max_length=150, help_text="substring of the job id, any case")
    submitted_after = serializers.CharField(required=False, help_text="YYYY-MM-DD or ISO 8601, inclusive")
    submitted_before = serializers.CharField(
        required=False, help_text="YYYY-MM-DD (the whole day included) or ISO 8601, exclusive"
    )


class JobListParametersSerializer(JobFilterSerializer):
    sort = serializers.CharField(
        required=False,
        help_text="name|user|band|effective|state|route|tasks|submitted; - first for descending (default -submitted)",
    )


class BulkCancelRequestSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.CharField(), required=False)
    filter = JobFilterSerializer(required=False)
    dry_run = serializers.BooleanField(required=False, default=False, help_text="only count what would be cancelled")


class BulkCancelSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    selected = serializers.ListField(
        child=serializers.CharField(), help_text="the selected unfinished jobs (first 100)"
    )
    selected_count = serializers.IntegerField()
    jobs = serializers.IntegerField(help_text="jobs killed (or to be killed), unfinished descendants included")
    tasks = serializers.IntegerField(help_text="unfinished tasks killed (or to be killed)")


class CancelSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the cancelled job")
    state = serializers.ChoiceField(choices=JOB_STATES)
    killed_jobs = serializers.ListField(
        child=serializers.CharField(), help_text="this job and its unfinished descendants"
    )
    killed_tasks = serializers.IntegerField()


class DowngradeSerializer(serializers.Serializer):
    """A downgrade as ``core.explain.Downgrade`` renders it: the sentence and the badge's short form."""

    spend = serializers.IntegerField()
    limit = serializers.IntegerField()
    text = serializers.CharField(help_text='e.g. "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"')
    badge = serializers.CharField(help_text='e.g. "downgraded: 2,400 pts over (12,400 > 10,000)"')


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
        "the wait so far (as of now)"
    )
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
    scale_group = serializers.CharField(
        allow_null=True, help_text="a TPU scale group that could create a matching slice"
    )
    band = BandField(help_text="the band it queues at")
    held_by = HolderSerializer(
        many=True,
        help_text="not_now: the top holders of the matching workers that this job "
        "may evict (the preemption pass's rule: strictly lower band, and "
        "the same kind of work: a CPU task evicts only CPU work)",
    )
    held_by_others = HeldByOthersSerializer(
        allow_null=True, help_text="not_now: the rest of the top holders, which only free room by finishing"
    )
    as_of_tick = serializers.IntegerField(
        allow_null=True, help_text="the tick the workers were read at (once per tick); null: read now, no tick yet"
    )


class PriorityFactorSerializer(serializers.Serializer):
    factor = serializers.ChoiceField(
        choices=[
            "effective_band",
            "round_robin_turn",
            "own_tasks_ahead",
            "requested_band",
            "depth",
            "root_submitted_at_ms",
            "submitted_at_ms",
            "task_index",
        ]
    )
    label = serializers.CharField(help_text="the factor for people, e.g. 'Round-robin turn'")
    value = serializers.JSONField(allow_null=True, help_text="for programs: a band name, a count or epoch milliseconds")
    text = serializers.CharField(
        help_text="the value for people: a band, '2nd of 5 users', an ISO time with its age at the tick"
    )
    detail = serializers.CharField(allow_null=True)
    users = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="round_robin_turn: the band's users in turn order with their spend at the tick",
    )


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
    kind = serializers.ChoiceField(
        choices=["running", "pending", "ran"],
        help_text="running: placed, by stamped band; pending: by queued band; "
        "ran: finished, by the band of the last attempt",
    )
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
    effective_band = BandField(
        help_text="the band its pending tasks queue in now; for a finished job, ran_as (else the requested band)"
    )
    ran_as = NullableBandField(
        help_text="a finished job: the band most of its tasks' last attempts ran as; "
        "null while unfinished or if nothing ran"
    )
    downgrade = DowngradeSerializer(allow_null=True, help_text="null for a finished job: it ran as ran_as")
    spend = serializers.IntegerField(help_text="live")
    limit = serializers.IntegerField(help_text="effective budget limit, live; 0 = unlimited")
    spend_at_tick = serializers.IntegerField(allow_null=True, help_text="the spend the scheduler used at `tick`")
    limit_at_tick = serializers.IntegerField(allow_null=True, help_text="the limit the scheduler used at `tick`")
    position = serializers.IntegerField(
        allow_null=True, help_text="of its first pending task, in its band, as of `tick`"
    )
    queued_band = NullableBandField(help_text="the band of that task, as of `tick`")
    band_pending = serializers.IntegerField(allow_null=True, help_text="tasks the tick left pending in that band")
    band_queue_length = serializers.IntegerField(allow_null=True, help_text="deprecated: same as band_pending")
    pending_reason = PendingReasonField(allow_null=True)
    estimated_start = EstimatedStartSerializer(
        allow_null=True, help_text="of its first pending task; null with a reason"
    )
    estimated_start_reason = serializers.CharField(allow_blank=True, help_text="why estimated_start is null")
    estimated_start_text = serializers.CharField(allow_blank=True, help_text='e.g. "would start in about 20-45 min"')
    tick = serializers.IntegerField(allow_null=True, help_text="the tick the queue positions come from")
    bands = BandSummarySerializer(many=True, help_text="tasks per stamped (running) and queued (pending) band")
    bands_text = serializers.CharField()
    feasibility = FeasibilitySerializer(allow_null=True, help_text="can it ever run? (null for a finished job)")
    priority = PrioritySerializer(
        allow_null=True, help_text="the factors of its first waiting task's place (like sprio)"
    )
    tasks = ExplainTaskSerializer(many=True)
    preemptions = ExplainPreemptionSerializer(many=True)
    what_would_change = serializers.CharField()
