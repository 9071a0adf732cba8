"""Every write use-case: the one way in for writes, shared by the API, the CLI, the console and admin.

Each function takes the acting Django user first, checks what that user may do, validates its
arguments (raising :mod:`scheduler.errors` with the field named), and writes in one transaction.
Every change to a budget or an uplift grant writes an :class:`AuditEntry` (who, what, before,
after, when, why).

Arguments arrive as the caller got them (JSON values from the API, strings from console forms),
so the parsers here accept both ``8`` and ``"8"`` and are the single source of the validation
messages. ``what_if`` lives here too because it runs the same submission rules; it writes nothing.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone
from rest_framework.authtoken.models import Token

from scheduler import dispatch, grants, queries, roles
from scheduler.budget_tiers import budget_state
from scheduler.core.bands import ADMIN_BANDS, BAND_NAMES, Band
from scheduler.core.types import (
    ACTIVE_STATES,
    NON_TERMINAL_STATES,
    TERMINAL_JOB_STATES,
    ConstraintOp,
    DeviceType,
    JobState,
    TaskState,
)
from scheduler.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    Unauthenticated,
)
from scheduler.models import MAX_ID_LENGTH, Attempt, AuditEntry, Job, Task, UpliftGrant, UserBudget, Worker
from scheduler.observability import events

log = logging.getLogger(__name__)

ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
NON_TERMINAL_VALUES = sorted(s.value for s in NON_TERMINAL_STATES)
TERMINAL_JOB_VALUES = sorted(s.value for s in TERMINAL_JOB_STATES)

# A SYSTEM submission must say why, naming the kind of work SYSTEM is for as a complete word:
# "hero run; commit=abc" passes, "superhero" does not.
SYSTEM_REASON = re.compile(r"\b(hero|finelog|iris)\b", re.IGNORECASE)
# One segment of a job id: what Django allows in usernames, so a username is always a segment.
# No ':' (it starts a custom verb in the API's URLs) and no '/' (the separator).
SEGMENT = re.compile(r"^[A-Za-z0-9_.@+-]+$")
# Storage bounds, so no value reaches the database that it cannot hold.
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
# Bounds on a task's request. Far above any real host; they keep arithmetic and columns sane.
MAX_CPU_CORES = 1_000_000
MAX_MEMORY_BYTES = 2**60
MAX_DEVICE_COUNT = 1_000_000
MAX_CONSTRAINTS = 64
MAX_COMMAND_ITEMS = 1000
MAX_TEXT = 10_000
# An uplift lasts at most this long; longer needs a budget change, which is reviewed differently.
MAX_UPLIFT_SECONDS = 90 * 24 * 3600
DEFAULT_CPU_CORES = 1
DEFAULT_MEMORY_BYTES = 1 << 30
# Advisory lock key serialising submissions on PostgreSQL (SQLite serialises writers anyway):
# submission times must be strictly increasing and the per-user task cap must not be raced.
SUBMIT_LOCK_KEY = 0x1215_0001

MEMORY_UNITS = {
    "": 1,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50,
}
MEMORY_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?)?b?\s*$", re.IGNORECASE)


# --- authorization --------------------------------------------------------------------------------


def require_authenticated(actor) -> None:
    if actor is None or not actor.is_authenticated:
        raise Unauthenticated("sign in first: send 'Authorization: Token <key>' (iris login) or use a session")


def require_admin(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_admin(actor):
        raise PermissionDenied(f"only admins may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})")


def require_operator(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_operator(actor):
        raise PermissionDenied(
            f"only operators may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})"
        )


def owns_job(actor, job: Job) -> bool:
    """The budget identity of a job is its root's submitter: they own the whole tree."""
    return job.user == actor.username or roles.is_admin(actor)


# --- parsers: raw values -> clean values, INVALID_ARGUMENT naming the field -------------------------


def check_text(value: str, name: str) -> str:
    """Reject what no column can store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise InvalidArgument("must not contain NUL characters", field=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("must be valid Unicode text", field=name) from None
    return value


def parse_text(value: Any, name: str, *, required: bool = False, max_length: int = MAX_TEXT) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidArgument(f"expected a string, got {type(value).__name__}", field=name)
    value = check_text(value.strip(), name)
    if required and not value:
        raise InvalidArgument("required", field=name)
    if len(value) > max_length:
        raise InvalidArgument(f"at most {max_length} characters", field=name)
    return value


def parse_int(value: Any, name: str, *, minimum: int = 0, maximum: int = MAX_INT32, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise InvalidArgument("required", field=name)
        return default
    if isinstance(value, bool):
        raise InvalidArgument("expected an integer", field=name)
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgument(f"expected an integer, got {value!r}", field=name)
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidArgument(f"expected an integer, got {value!r}", field=name) from None
    elif not isinstance(value, int):
        raise InvalidArgument(f"expected an integer, got {type(value).__name__}", field=name)
    if value < minimum:
        raise InvalidArgument(f"must be at least {minimum}", field=name)
    if value > maximum:
        raise InvalidArgument(f"must be at most {maximum}", field=name)
    return value


def parse_number(value: Any, name: str, *, minimum: float = 0, maximum: float, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise InvalidArgument("expected a number", field=name)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InvalidArgument(f"expected a number, got {value!r}", field=name) from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument("expected a finite number", field=name)
    if value < minimum:
        raise InvalidArgument(f"must be at least {minimum:g}", field=name)
    if value > maximum:
        raise InvalidArgument(f"must be at most {maximum:g}", field=name)
    return float(value)


def parse_band(value: Any, name: str) -> Band:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidArgument(f"expected one of {BAND_NAMES}", field=name)
    if isinstance(value, str):
        check_text(value, name)
    try:
        return Band.parse(value)
    except ValueError:
        raise InvalidArgument(f"unknown band {value!r}; expected one of {BAND_NAMES}", field=name) from None


def parse_memory(value: Any, name: str = "memory") -> int:
    """Bytes from an integer or a string like ``16Gi``, ``512Mi``, ``2G`` or ``1.5Gi``."""
    if value is None or value == "":
        return DEFAULT_MEMORY_BYTES
    if isinstance(value, bool):
        raise InvalidArgument("expected bytes as an integer or a size like '16Gi'", field=name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        amount = value
    elif isinstance(value, str):
        match = MEMORY_PATTERN.match(value)
        if not match:
            raise InvalidArgument(
                f"cannot read {value!r} as a size; use bytes or a unit: 512Mi, 16Gi, 2G", field=name
            )
        number, unit = match.groups()
        amount = int(float(number) * MEMORY_UNITS[(unit or "").lower()])
    else:
        raise InvalidArgument("expected bytes as an integer or a size like '16Gi'", field=name)
    if amount < 0:
        raise InvalidArgument("must not be negative", field=name)
    if amount > MAX_MEMORY_BYTES:
        raise InvalidArgument(f"must be at most {MAX_MEMORY_BYTES} bytes", field=name)
    return amount


def parse_cpu_millicores(value: Any, name: str = "cpu") -> int:
    cores = parse_number(value, name, maximum=MAX_CPU_CORES, default=DEFAULT_CPU_CORES)
    return round(cores * 1000)


@dataclass(frozen=True)
class DeviceRequest:
    type: DeviceType = DeviceType.CPU
    variant: str = ""
    count: int = 0

    def as_json(self) -> dict[str, Any]:
        if self.type is DeviceType.CPU:
            return {"type": "cpu"}
        return {"type": self.type.value, "variant": self.variant, "count": self.count}


def parse_device(value: Any, name: str = "device") -> DeviceRequest:
    """``{"type": "cpu"}``, ``{"type": "gpu", "variant": "h100", "count": 8}`` or the TPU form."""
    if value is None:
        return DeviceRequest()
    if not isinstance(value, Mapping):
        raise InvalidArgument('expected an object like {"type": "gpu", "variant": "h100", "count": 8}', field=name)
    raw_type = value.get("type", "cpu")
    try:
        kind = DeviceType(raw_type.lower() if isinstance(raw_type, str) else raw_type)
    except ValueError:
        raise InvalidArgument(f"unknown device type {raw_type!r}; expected cpu, gpu or tpu", field=f"{name}.type") from None
    if kind is DeviceType.CPU:
        return DeviceRequest()
    variant = parse_text(value.get("variant"), f"{name}.variant", required=True, max_length=64)
    if not SEGMENT.match(variant):
        raise InvalidArgument("letters, digits and . _ - + @ only", field=f"{name}.variant")
    count = parse_int(value.get("count"), f"{name}.count", minimum=1, maximum=MAX_DEVICE_COUNT)
    return DeviceRequest(kind, variant, count)


def parse_constraints(value: Any, name: str = "constraints") -> list[dict[str, Any]]:
    """``[{key, op: eq|ne|in|exists, value, soft}]``, normalised to the stored (snapshot) form."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidArgument("expected a list of {key, op, value, soft}", field=name)
    if len(value) > MAX_CONSTRAINTS:
        raise InvalidArgument(f"at most {MAX_CONSTRAINTS} constraints", field=name)
    result = []
    for i, raw in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(raw, Mapping):
            raise InvalidArgument("expected an object {key, op, value, soft}", field=where)
        key = parse_text(raw.get("key"), f"{where}.key", required=True, max_length=64)
        raw_op = raw.get("op", "eq")
        try:
            op = ConstraintOp(raw_op.lower() if isinstance(raw_op, str) else raw_op)
        except ValueError:
            raise InvalidArgument(f"unknown op {raw_op!r}; expected eq, ne, in or exists", field=f"{where}.op") from None
        soft = raw.get("soft", False)
        if not isinstance(soft, bool):
            raise InvalidArgument("expected true or false", field=f"{where}.soft")
        item: dict[str, Any] = {"key": key, "op": op.value}
        raw_value = raw.get("value")
        if op is ConstraintOp.EXISTS:
            if raw_value is not None:
                raise InvalidArgument("'exists' takes no value", field=f"{where}.value")
        elif op is ConstraintOp.IN:
            if not isinstance(raw_value, list | tuple) or not raw_value:
                raise InvalidArgument("'in' takes a non-empty list of strings", field=f"{where}.value")
            item["value"] = [_attribute_value(v, f"{where}.value[{j}]") for j, v in enumerate(raw_value)]
        else:
            if raw_value is None:
                raise InvalidArgument(f"'{op.value}' takes a string value", field=f"{where}.value")
            item["value"] = _attribute_value(raw_value, f"{where}.value")
        item["soft"] = soft
        result.append(item)
    return result


def _attribute_value(value: Any, name: str) -> str:
    """Attribute values are strings; numbers are accepted and compared as their text."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument("expected a string", field=name)
    text = value if isinstance(value, str) else str(value)
    return check_text(text, name)[:255]


def parse_attributes(value: Any, name: str = "attributes") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument('expected an object of string attributes, e.g. {"tpu-name": "v5p-a"}', field=name)
    result = {}
    for key, raw in value.items():
        key = check_text(str(key), f"{name}.{key}")
        if not key.strip():
            raise InvalidArgument("attribute names must not be empty", field=name)
        result[key] = _attribute_value(raw, f"{name}.{key}")
    return result


def parse_string_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidArgument("expected a list of strings", field=name)
    if len(value) > MAX_COMMAND_ITEMS:
        raise InvalidArgument(f"at most {MAX_COMMAND_ITEMS} items", field=name)
    result = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidArgument("expected a string", field=f"{name}[{i}]")
        result.append(check_text(item, f"{name}[{i}]"))
    return result


def parse_segment(value: str, name: str) -> str:
    if not SEGMENT.match(value) or value in {".", ".."}:
        raise InvalidArgument(
            f"{value!r} is not a valid name: use letters, digits and . _ - + @ (no ':' and no spaces)", field=name
        )
    return value


def normalize_job_id(value: Any, name: str = "job") -> str:
    """``alice/train`` or ``/alice/train`` -> ``/alice/train``; NOT_FOUND-proof for lookups."""
    text = parse_text(value, name, required=True, max_length=MAX_ID_LENGTH)
    segments = text.strip("/").split("/")
    for segment in segments:
        parse_segment(segment, name)
    if len(segments) < 2:
        raise InvalidArgument("a job id has the form /<user>/<name>[/<child>...]", field=name)
    return "/" + "/".join(segments)


# --- submission -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRequest:
    """A job submission as parsed from the caller; the fields mirror POST /api/v1/jobs/."""

    name: str
    parent: str | None = None
    priority: Band | None = None
    system_reason: str = ""
    replicas: int = 1
    cpu_millicores: int = DEFAULT_CPU_CORES * 1000
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    device: DeviceRequest = field(default_factory=DeviceRequest)
    group_by: str | None = None
    constraints: tuple[dict[str, Any], ...] = ()
    scheduling_timeout_seconds: float | None = None
    max_retries_preemption: int = 100
    max_retries_failure: int = 0
    command: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()


JOB_REQUEST_FIELDS = frozenset(
    {
        "name", "parent", "priority", "system_reason", "replicas", "cpu", "memory", "device", "group_by",
        "constraints", "scheduling_timeout_seconds", "max_retries_preemption", "max_retries_failure",
        "command", "argv",
    }
)


def parse_job_request(data: Any, *, ignore: Sequence[str] = ()) -> JobRequest:
    """Validate a submission body. Unknown fields are rejected so a typo never goes unnoticed."""
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a JSON object describing the job")
    unknown = sorted(set(data) - JOB_REQUEST_FIELDS - set(ignore))
    if unknown:
        raise InvalidArgument(f"unknown field; known fields are {', '.join(sorted(JOB_REQUEST_FIELDS))}", field=unknown[0])
    name = parse_text(data.get("name"), "name", required=True, max_length=MAX_ID_LENGTH)
    if ":" in name:
        raise InvalidArgument("job names may not contain ':'", field="name")
    parent = data.get("parent")
    priority = data.get("priority")
    group_by = parse_text(data.get("group_by"), "group_by", max_length=64) or None
    timeout = data.get("scheduling_timeout_seconds")
    return JobRequest(
        name=name,
        parent=normalize_job_id(parent, "parent") if parent not in (None, "") else None,
        priority=parse_band(priority, "priority") if priority not in (None, "") else None,
        system_reason=parse_text(data.get("system_reason"), "system_reason", max_length=500),
        replicas=parse_int(data.get("replicas"), "replicas", minimum=1, default=1),
        cpu_millicores=parse_cpu_millicores(data.get("cpu")),
        memory_bytes=parse_memory(data.get("memory")),
        device=parse_device(data.get("device")),
        group_by=group_by,
        constraints=tuple(parse_constraints(data.get("constraints"))),
        scheduling_timeout_seconds=(
            parse_number(timeout, "scheduling_timeout_seconds", minimum=1, maximum=365 * 24 * 3600, default=0)
            if timeout not in (None, "")
            else None
        ),
        max_retries_preemption=parse_int(data.get("max_retries_preemption"), "max_retries_preemption", default=100),
        max_retries_failure=parse_int(data.get("max_retries_failure"), "max_retries_failure", default=0),
        command=tuple(parse_string_list(data.get("command"), "command")),
        argv=tuple(parse_string_list(data.get("argv"), "argv")),
    )


@dataclass(frozen=True)
class SubmissionPlan:
    """A submission that passed every rule: what ``submit_job`` writes and ``what_if`` simulates."""

    job_id: str
    user: str
    band: Band
    parent: Job | None
    depth: int
    request: JobRequest
    budget_max_band: Band


def _resolve_job_id(actor, request: JobRequest) -> tuple[str, Job | None, str]:
    """The new job's id, its parent row and its budget identity, with ownership checked."""
    name = request.name
    parent_id = request.parent
    if name.startswith("/"):
        if parent_id:
            raise InvalidArgument("give either a full id '/<user>/<name>' or a parent and a one-segment name", field="name")
        segments = name.strip("/").split("/")
        for segment in segments:
            parse_segment(segment, "name")
        if len(segments) < 2:
            raise InvalidArgument("a full job id has the form /<user>/<name>", field="name")
        namespace = segments[0]
        if namespace != actor.username and not roles.is_admin(actor):
            raise PermissionDenied(
                f"root jobs of '{actor.username}' live under /{actor.username}/; you may not submit {name!r}",
                field="name",
            )
        if len(segments) > 2:
            parent_id = "/" + "/".join(segments[:-1])
        else:
            return "/" + "/".join(segments), None, namespace
        name = segments[-1]
    else:
        parse_segment(name, "name")

    if parent_id is None:
        return f"/{actor.username}/{name}", None, actor.username
    parent = Job.objects.filter(name=parent_id).first()
    if parent is None:
        raise NotFound(f"parent job {parent_id} does not exist", field="parent")
    if not owns_job(actor, parent):
        raise PermissionDenied(
            f"job {parent_id} belongs to '{parent.user}'; only its owner or an admin may add children", field="parent"
        )
    if parent.state in TERMINAL_JOB_VALUES:
        raise FailedPrecondition(f"parent job {parent_id} has already finished ({parent.state})", field="parent")
    return f"{parent_id}/{name}", parent, parent.user


def max_band_message(user: str, band: Band, max_band: Band) -> str:
    return (
        f"Budget identity '{user}' cannot submit {band.name} jobs (max band: {max_band.name}). "
        f"Use --priority {max_band.wire}, check that you are signed in "
        f"as the right user, or request an uplift."
    )


def plan_submission(actor, request: JobRequest) -> SubmissionPlan:
    """Apply every submission rule without writing; raise the first rule broken.

    Order (as Iris): identity and ownership, band, limits, then the job id being free.
    """
    require_authenticated(actor)
    job_id, parent, user = _resolve_job_id(actor, request)
    if len(job_id) > MAX_ID_LENGTH - 8:  # leaves room for "/<task index>"
        raise InvalidArgument(f"job id {job_id!r} is too long", field="name")

    band = request.priority if request.priority is not None else (Band(parent.band) if parent else Band.INTERACTIVE)
    effective = queries.effective_budget_for(user)
    if band in ADMIN_BANDS:
        if not roles.is_admin(actor):
            raise PermissionDenied(
                f"only admins may submit {band.name} jobs; use --priority interactive or batch", field="priority"
            )
        if band is Band.SYSTEM and not SYSTEM_REASON.search(request.system_reason):
            raise InvalidArgument(
                "SYSTEM jobs need a reason naming hero, finelog or iris work (e.g. 'hero run; commit=abc')",
                field="system_reason",
            )
    elif band < effective.max_band:
        # Never downgraded at submission: a band above max_band is refused, and says what to do.
        raise PermissionDenied(max_band_message(user, band, effective.max_band), field="priority",
                               details={"user": user, "band": band.wire, "max_band": effective.max_band.wire})

    if request.replicas > settings.MAX_REPLICAS_PER_JOB:
        raise ResourceExhausted(
            f"replicas: {request.replicas} exceeds the limit of {settings.MAX_REPLICAS_PER_JOB} tasks per job",
            field="replicas",
        )
    active = Task.objects.filter(job__user=user, state__in=NON_TERMINAL_VALUES).count()
    if active + request.replicas > settings.MAX_ACTIVE_TASKS_PER_USER:
        raise ResourceExhausted(
            f"'{user}' has {active} unfinished tasks; {request.replicas} more would exceed the limit of "
            f"{settings.MAX_ACTIVE_TASKS_PER_USER} per user. Wait for work to finish or cancel some.",
            field="replicas",
            details={"active_tasks": active, "limit": settings.MAX_ACTIVE_TASKS_PER_USER},
        )
    if Job.objects.filter(name=job_id).exists():
        raise FailedPrecondition(f"job {job_id} already exists; choose another name", field="name")
    return SubmissionPlan(
        job_id=job_id,
        user=user,
        band=band,
        parent=parent,
        depth=job_id.count("/") - 1,
        request=request,
        budget_max_band=effective.max_band,
    )


def submission_argv(request: JobRequest) -> list[str]:
    """The client's argv as stored for audit; the system reason is always in it."""
    argv = list(request.argv)
    if request.system_reason and request.system_reason not in argv:
        argv += ["--system-reason", request.system_reason]
    return argv


@events.counted_submissions
def submit_job(actor, request: JobRequest | Mapping[str, Any]) -> Job:
    """Submit a job: check every rule, then write the job and one task per replica atomically.

    A rejected submission writes nothing. After commit a prompt tick is requested; a broker
    outage is logged and never fails the submission (beat ticks anyway).
    """
    if not isinstance(request, JobRequest):
        request = parse_job_request(request)
    try:
        with transaction.atomic():
            lock_submissions()
            now_ms = current_ms()
            plan = plan_submission(actor, request)
            last = Job.objects.aggregate(last=Max("submitted_at_ms"))["last"]
            submitted = now_ms if last is None else max(now_ms, last + 1)
            parent = plan.parent
            job = Job.objects.create(
                name=plan.job_id,
                parent=parent,
                user=plan.user,
                submitted_by=actor,
                band=int(plan.band),
                state=JobState.PENDING.value,
                depth=plan.depth,
                submitted_at_ms=submitted,
                root_submitted_at_ms=parent.root_submitted_at_ms if parent else submitted,
                replicas=request.replicas,
                cpu_millicores=request.cpu_millicores,
                memory_bytes=request.memory_bytes,
                device_type=request.device.type.value,
                device_variant=request.device.variant,
                device_count=request.device.count,
                group_by=request.group_by,
                constraints=list(request.constraints),
                scheduling_deadline_ms=(
                    submitted + round(request.scheduling_timeout_seconds * 1000)
                    if request.scheduling_timeout_seconds
                    else None
                ),
                max_retries_preemption=request.max_retries_preemption,
                max_retries_failure=request.max_retries_failure,
                command=list(request.command),
                submission_argv=submission_argv(request),
                system_reason=request.system_reason,
            )
            Task.objects.bulk_create(
                [Task(job=job, index=i, state=TaskState.PENDING.value) for i in range(request.replicas)],
                batch_size=1000,
            )
            transaction.on_commit(request_prompt_tick, robust=True)
    except IntegrityError:
        # Two submissions of the same id raced past the existence check.
        raise FailedPrecondition(f"job {plan.job_id} already exists; choose another name", field="name") from None
    log.info("job %s submitted by %s as %s (%d tasks)", job.name, actor.username, plan.band.name, job.replicas,
             extra={"job": job.name, "actor": actor.username, "user": plan.user, "band": plan.band.wire,
                    "tasks": job.replicas, "action": "job.submit"})
    return job


def lock_submissions() -> None:
    """Serialise submissions (PostgreSQL advisory lock held until commit; SQLite locks at BEGIN)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SUBMIT_LOCK_KEY])


def request_prompt_tick() -> None:
    """Ask Celery for a tick now. Runs after commit; never raises (the broker may be down)."""
    try:
        from scheduler.tasks import tick

        tick.apply_async(expires=float(settings.TICK_SECONDS), retry=False)
    except Exception:  # noqa: BLE001 -- any broker failure; beat's next tick picks the job up
        log.warning("could not enqueue a prompt tick; the next scheduled tick will place the job", exc_info=True)


def current_ms() -> int:
    return int(time.time() * 1000)


# --- cancel ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelOutcome:
    job: str
    killed_jobs: list[str]
    killed_tasks: int


def cancel_job(actor, job_id: str) -> CancelOutcome:
    """Kill a job, its unfinished tasks and every unfinished descendant job.

    Active attempts are marked killed but keep ``finished_at`` empty: the worker still runs the
    process and its resources stay committed until the worker confirms it ended.
    """
    require_authenticated(actor)
    name = normalize_job_id(job_id)
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(name=name).first()
        if job is None:
            raise NotFound(f"job {name} does not exist", field="job")
        if not owns_job(actor, job):
            raise PermissionDenied(f"job {name} belongs to '{job.user}'; only its owner or an admin may cancel it")
        if job.state in TERMINAL_JOB_VALUES:
            raise FailedPrecondition(f"job {name} has already finished ({job.state})", field="job")
        now = timezone.now()
        tree = Job.objects.filter(Q(pk=job.pk) | Q(name__startswith=f"{name}/")).exclude(state__in=TERMINAL_JOB_VALUES)
        jobs = dict(tree.values_list("pk", "name"))
        active = Attempt.objects.filter(task__job_id__in=list(jobs), state__in=ACTIVE_VALUES)
        # Their processes still run: STOP intents tell the workers (delivered after commit).
        dispatch.write_stop_intents(
            active.values_list("task_id", "number", "worker_id"), f"Killed by {actor.username}", now
        )
        active.update(state=TaskState.KILLED.value, error=f"Killed by {actor.username}")
        killed_tasks = Task.objects.filter(job_id__in=list(jobs), state__in=NON_TERMINAL_VALUES).update(
            state=TaskState.KILLED.value, worker=None, updated_at=now
        )
        Job.objects.filter(pk__in=list(jobs)).exclude(state__in=TERMINAL_JOB_VALUES).update(
            state=JobState.KILLED.value, finished_at=now
        )
    log.info("job %s cancelled by %s (%d jobs, %d tasks)", name, actor.username, len(jobs), killed_tasks,
             extra={"job": name, "actor": actor.username, "jobs": len(jobs), "tasks": killed_tasks,
                    "action": "job.cancel"})
    return CancelOutcome(job=name, killed_jobs=sorted(jobs.values()), killed_tasks=killed_tasks)


# --- budgets and grants ---------------------------------------------------------------------------


def parse_user_id(value: Any, name: str = "user") -> str:
    user = parse_text(value, name, required=True, max_length=150)
    return parse_segment(user, name)


def audit(actor, action: str, target: str, before: Any, after: Any, reason: str) -> AuditEntry:
    """Record who changed a budget or grant, in the audit table and (after commit) the log."""
    actor_name = actor.username if actor is not None and actor.is_authenticated else "system"
    transaction.on_commit(partial(
        log.info, "%s %s by %s: %s -> %s", action, target, actor_name, before, after,
        extra={"action": action, "target": target, "actor": actor_name},
    ))
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.username if actor is not None and actor.is_authenticated else "system",
        action=action,
        target=target,
        before=before,
        after=after,
        reason=reason,
    )


def set_budget(actor, user_id: Any, *, budget_limit: Any = None, max_band: Any = None, reason: Any = "") -> UserBudget:
    """Admins set a user's budget row (upsert). Omitted values keep the current ones (or defaults)."""
    require_admin(actor, "set budgets")
    user = parse_user_id(user_id)
    if budget_limit in (None, "") and max_band in (None, ""):
        raise InvalidArgument("give budget_limit, max_band or both", field="budget_limit")
    limit = (
        parse_int(budget_limit, "budget_limit", maximum=MAX_INT64) if budget_limit not in (None, "") else None
    )
    band = parse_band(max_band, "max_band") if max_band not in (None, "") else None
    why = parse_text(reason, "reason", required=True)
    defaults = queries.budget_defaults()
    with transaction.atomic():
        row = UserBudget.objects.select_for_update().filter(user_id=user).first()
        before = budget_state(row.budget_limit, row.max_band) if row else None
        if row is None:
            row = UserBudget(user_id=user, budget_limit=defaults.budget_limit, max_band=int(defaults.max_band))
        if limit is not None:
            row.budget_limit = limit
        if band is not None:
            row.max_band = int(band)
        row.save()
        audit(actor, "budget.set", user, before, budget_state(row.budget_limit, row.max_band), why)
    return row


def grant_state(grant: UpliftGrant) -> dict[str, Any]:
    """A grant as audit entries record it."""
    return {
        "state": grant.state,
        "max_band": None if grant.max_band is None else Band(grant.max_band).wire,
        "budget_limit": grant.budget_limit,
        "duration_seconds": grant.duration_seconds,
        "starts_at": grant.starts_at.isoformat() if grant.starts_at else None,
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
    }


def request_uplift(
    actor, *, user: Any = None, max_band: Any = None, budget_limit: Any = None, reason: Any = "",
    duration_seconds: Any = None,
) -> UpliftGrant:
    """Ask for a time-bounded raise of ``max_band`` and/or ``budget_limit``. Researchers ask for themselves."""
    require_authenticated(actor)
    target = parse_user_id(user) if user not in (None, "") else actor.username
    if target != actor.username and not roles.is_admin(actor):
        raise PermissionDenied(f"you may request uplifts only for yourself ('{actor.username}')", field="user")
    if max_band in (None, "") and budget_limit in (None, ""):
        raise InvalidArgument("ask for max_band, budget_limit or both", field="max_band")
    band = parse_band(max_band, "max_band") if max_band not in (None, "") else None
    limit = parse_int(budget_limit, "budget_limit", maximum=MAX_INT64) if budget_limit not in (None, "") else None
    why = parse_text(reason, "reason", required=True)
    duration = parse_int(duration_seconds, "duration_seconds", minimum=60, maximum=MAX_UPLIFT_SECONDS)
    with transaction.atomic():
        grant = UpliftGrant.objects.create(
            user_id=target,
            requested_by=actor,
            max_band=int(band) if band is not None else None,
            budget_limit=limit,
            reason=why,
            duration_seconds=duration,
        )
        audit(actor, "uplift.request", f"uplift {grant.pk} for {target}", None, grant_state(grant), why)
    return grant


def _decide_uplift(actor, grant_id: Any, *, approve: bool, duration_seconds: Any, note: Any) -> UpliftGrant:
    verb = "approve" if approve else "deny"
    require_admin(actor, f"{verb} uplifts")
    pk = parse_int(grant_id, "id", minimum=1, maximum=MAX_INT64)
    text = parse_text(note, "note")
    duration = (
        parse_int(duration_seconds, "duration_seconds", minimum=60, maximum=MAX_UPLIFT_SECONDS)
        if duration_seconds not in (None, "")
        else None
    )
    with transaction.atomic():
        grant = UpliftGrant.objects.select_for_update().filter(pk=pk).first()
        if grant is None:
            raise NotFound(f"uplift {pk} does not exist", field="id")
        if grant.state != UpliftGrant.State.REQUESTED:
            raise FailedPrecondition(f"uplift {pk} was already decided ({grant.state})", field="id")
        before = grant_state(grant)
        now = timezone.now()
        grant.decided_by = actor
        grant.decided_at = now
        grant.decision_note = text
        if approve:
            if duration is not None:
                grant.duration_seconds = duration
            grant.state = UpliftGrant.State.APPROVED
            grant.starts_at = now
            grant.expires_at = now + timedelta(seconds=grant.duration_seconds)
        else:
            grant.state = UpliftGrant.State.DENIED
        grant.save()
        audit(actor, f"uplift.{verb}", f"uplift {pk} for {grant.user_id}", before, grant_state(grant),
              text or grant.reason)
    return grant


def approve_uplift(actor, grant_id: Any, *, duration_seconds: Any = None, note: Any = "") -> UpliftGrant:
    """Admins approve a requested grant: it starts now and expires after its duration."""
    return _decide_uplift(actor, grant_id, approve=True, duration_seconds=duration_seconds, note=note)


def deny_uplift(actor, grant_id: Any, *, note: Any = "") -> UpliftGrant:
    return _decide_uplift(actor, grant_id, approve=False, duration_seconds=None, note=note)


def expire_uplifts(now: datetime | None = None) -> int:
    """Approved grants past their expiry become expired (audited). Beat runs this every minute."""
    return grants.expire_uplifts(now or timezone.now())


# --- workers --------------------------------------------------------------------------------------


def parse_worker_name(value: Any, name: str = "name") -> str:
    return parse_segment(parse_text(value, name, required=True, max_length=MAX_ID_LENGTH), name)


def register_worker(
    actor, *, name: Any, cpu: Any = None, memory: Any = None, device: Any = None, attributes: Any = None,
    backend: Any = "local",
) -> tuple[Worker, bool]:
    """Operators (or worker agents signed in as one) register a worker; idempotent upsert by name.

    Re-registering updates the capacity and marks the worker healthy; draining is left as it was.
    Returns the worker and whether it was created.
    """
    require_operator(actor, "register workers")
    worker_name = parse_worker_name(name)
    if cpu in (None, ""):
        raise InvalidArgument("required (cores)", field="cpu")
    if memory in (None, ""):
        raise InvalidArgument("required (bytes or a size like '64Gi')", field="memory")
    millicores = parse_cpu_millicores(cpu)
    memory_bytes = parse_memory(memory)
    dev = parse_device(device)
    attrs = parse_attributes(attributes)
    backend_name = parse_segment(parse_text(backend, "backend", max_length=32) or "local", "backend")
    now = timezone.now()
    with transaction.atomic():
        worker, created = Worker.objects.select_for_update().get_or_create(
            name=worker_name,
            defaults={"cpu_millicores": millicores, "memory_bytes": memory_bytes},
        )
        worker.cpu_millicores = millicores
        worker.memory_bytes = memory_bytes
        worker.device_type = dev.type.value
        worker.device_variant = dev.variant
        worker.device_count = dev.count
        worker.attributes = attrs
        worker.backend = backend_name
        worker.healthy = True
        worker.last_heartbeat = now
        worker.save()
    return worker, created


def heartbeat_worker(actor, name: Any, *, healthy: Any = True) -> Worker:
    require_operator(actor, "send worker heartbeats")
    worker_name = parse_worker_name(name)
    if healthy is None:
        healthy = True
    if not isinstance(healthy, bool):
        raise InvalidArgument("expected true or false", field="healthy")
    with transaction.atomic():
        updated = Worker.objects.filter(name=worker_name).update(healthy=healthy, last_heartbeat=timezone.now())
        if not updated:
            raise NotFound(f"worker {worker_name} is not registered", field="name")
        return Worker.objects.get(name=worker_name)


def drain_worker(actor, name: Any) -> Worker:
    """Stop placing new work on a worker; what runs there keeps running. Idempotent."""
    require_operator(actor, "drain workers")
    worker_name = parse_worker_name(name)
    with transaction.atomic():
        updated = Worker.objects.filter(name=worker_name).update(draining=True)
        if not updated:
            raise NotFound(f"worker {worker_name} is not registered", field="name")
        worker = Worker.objects.get(name=worker_name)
    log.info("worker %s drained by %s", worker_name, actor.username,
             extra={"worker": worker_name, "actor": actor.username, "action": "worker.drain"})
    return worker


# --- tokens and ticks -----------------------------------------------------------------------------


def mint_token(username: Any, password: Any) -> tuple[str, Any]:
    """Exchange a username and password for the user's API token (created on first use)."""
    user_name = parse_text(username, "username", required=True, max_length=150)
    if not isinstance(password, str) or not password:
        raise InvalidArgument("required", field="password")
    check_text(password, "password")
    user = authenticate(username=user_name, password=password)
    if user is None or not user.is_active:
        raise Unauthenticated("wrong username or password")
    token, _ = Token.objects.get_or_create(user=user)
    return token.key, user


def run_tick_now(actor):
    """Operators run one scheduling tick synchronously. FAILED_PRECONDITION if one is running."""
    require_operator(actor, "run ticks")
    from scheduler.tick import run_tick

    outcome = run_tick()
    if outcome is None:
        raise FailedPrecondition("another tick holds the tick lease; try again in a moment")
    return outcome


# --- what-if --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatIf:
    accepted: bool
    error: dict[str, str] | None
    requested_band: Band | None
    effective_band: Band | None
    spend: int | None
    limit: int | None
    position: int | None
    would_place: bool
    worker: str | None
    would_preempt: list[str]
    job: str | None = None
    pending_reason: str | None = None


def what_if(actor, data: Any) -> WhatIf:
    """Answer "what if I submitted this?" on the live snapshot. Writes nothing.

    ``data`` is a submission body plus an optional ``user``: admins and operators may ask on
    another user's behalf, and the rules are then those that user would meet.
    """
    require_authenticated(actor)
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a JSON object describing the job")
    subject = actor
    if data.get("user") not in (None, ""):
        username = parse_user_id(data.get("user"))
        if username != actor.username:
            if not roles.is_operator(actor):
                raise PermissionDenied("only admins and operators may ask what-if for another user", field="user")
            subject = get_user_model().objects.filter(username=username).first()
            if subject is None:
                raise NotFound(f"user {username} does not exist", field="user")
    request = parse_job_request(data, ignore=("user",))
    try:
        plan = plan_submission(subject, request)
    except ServiceError as exc:
        # A broken submission rule is an answer ("rejected, and why"), not an error of this call.
        # The requested band as far as it is known without the parent (a root defaults to INTERACTIVE).
        requested = request.priority or (None if request.parent or request.name.count("/") > 2 else Band.INTERACTIVE)
        return WhatIf(
            accepted=False, error={"code": exc.code, "message": exc.message}, requested_band=requested,
            effective_band=None, spend=None, limit=None, position=None, would_place=False, worker=None,
            would_preempt=[],
        )
    return simulate_plan(plan)


def simulate_plan(plan: SubmissionPlan) -> WhatIf:
    """Add the planned job to the live snapshot and run the core's decision on it."""
    from scheduler.core.decision import decide
    from scheduler.core.types import Device, JobSpec, Resources, TaskSnapshot
    from scheduler.cluster_rows import constraints_from_json
    from scheduler.snapshot import explanation_to_json, load_snapshot, reason_text

    now_ms = current_ms()
    loaded = load_snapshot(now_ms)
    snapshot = loaded.snapshot
    req = plan.request
    device = Device() if req.device.type is DeviceType.CPU else Device(req.device.type, req.device.variant, req.device.count)
    job = JobSpec(
        id=plan.job_id,
        user=plan.user,
        band=plan.band,
        parent=plan.parent.name if plan.parent else None,
        submitted_at_ms=now_ms,
        root_submitted_at_ms=plan.parent.root_submitted_at_ms if plan.parent else now_ms,
        replicas=req.replicas,
        resources=Resources(req.cpu_millicores, req.memory_bytes, device),
        group_by=req.group_by,
        constraints=constraints_from_json(list(req.constraints)),
        scheduling_deadline_ms=(
            now_ms + round(req.scheduling_timeout_seconds * 1000) if req.scheduling_timeout_seconds else None
        ),
        max_retries_preemption=req.max_retries_preemption,
        max_retries_failure=req.max_retries_failure,
    )
    tasks = tuple(TaskSnapshot(id=f"{plan.job_id}/{i}", job_id=plan.job_id, index=i) for i in range(req.replicas))
    hypothetical = replace(snapshot, jobs={**snapshot.jobs, plan.job_id: job}, tasks=snapshot.tasks + tasks)
    decision = decide(hypothetical)
    ours = {t.id for t in tasks}
    first = tasks[0].id
    assignments = [a for a in decision.assignments if a.task in ours]
    victims = sorted(p.victim for p in decision.preemptions if p.preemptor in ours)
    explanation = explanation_to_json(hypothetical, decision)
    queued = [explanation["tasks"][t] for t in sorted(ours) if t in explanation["tasks"]]
    effective = decision.effective_bands.get(first, plan.band)
    budgets_now = hypothetical.budgets
    limit = (
        budgets_now[plan.user].budget_limit if plan.user in budgets_now
        else hypothetical.config.budget_defaults.budget_limit
    )
    reason = decision.pending_reasons.get(first)
    return WhatIf(
        accepted=True,
        error=None,
        requested_band=plan.band,
        effective_band=Band(effective),
        spend=int(decision.spend.get(plan.user, 0)),
        limit=limit,
        position=min(q[1] for q in queued) if queued else None,
        would_place=bool(assignments),
        worker=assignments[0].worker if assignments else None,
        would_preempt=victims,
        job=plan.job_id,
        pending_reason=reason_text(reason) if reason is not None else None,
    )
