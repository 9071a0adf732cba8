"""Submitting a job: every submission rule (:func:`plan_submission`), then the job and its tasks
written in one transaction (:func:`submit_job`), and a prompt tick requested after commit.

No global lock: submissions of one budget identity are serialised (its unfinished-task cap),
and submission times come from the submission clock (``scheduler.store.submission_order``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from scheduler import roles
from scheduler.access import owns_job, require_authenticated
from scheduler.budgets.rules import effective_budget_for
from scheduler.cluster_config import cluster_config
from scheduler.core.bands import ADMIN_BANDS, Band
from scheduler.core.explain import format_cores, format_memory
from scheduler.core.kueue import pinned_backend_in, settled_route
from scheduler.core.types import ANY_VARIANT, DeviceType, JobState, TaskState
from scheduler.enqueue import PROMPT_TICK, request_once
from scheduler.errors import FailedPrecondition, InvalidArgument, NotFound, OverLimit, PermissionDenied, ResourceExhausted
from scheduler.inputs import parse_segment
from scheduler.jobs.request import JobRequest, parse_job_request
from scheduler.models import MAX_ID_LENGTH, Job, Task, Worker
from scheduler import instruments
from scheduler.store import clock
from scheduler.store.locks import hold_until_commit
from scheduler.store.submission_order import next_submission_ms
from scheduler.store.states import NON_TERMINAL_VALUES, TERMINAL_JOB_VALUES

log = logging.getLogger(__name__)

# A SYSTEM submission must say why, naming the kind of work SYSTEM is for as a complete word:
# "hero run; commit=abc" passes, "superhero" does not.
SYSTEM_REASON = re.compile(r"\b(hero|finelog|iris)\b", re.IGNORECASE)


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


def plan_submission(actor, request: JobRequest, *, serialise_user: bool = False) -> SubmissionPlan:
    """Apply every submission rule without writing; raise the first rule broken.

    Order (as Iris): identity and ownership, band, limits, then the job id being free.
    ``serialise_user`` (a submission about to write) first waits for the budget identity's other
    submissions to commit, so the unfinished-task cap counts them.
    """
    require_authenticated(actor)
    job_id, parent, user = _resolve_job_id(actor, request)
    if len(job_id) > MAX_ID_LENGTH - 8:  # leaves room for "/<task index>"
        raise InvalidArgument(f"job id {job_id!r} is too long", field="name")

    band = request.priority if request.priority is not None else (Band(parent.band) if parent else Band.INTERACTIVE)
    effective = effective_budget_for(user)
    if band in ADMIN_BANDS:
        if not roles.is_admin(actor):
            raise PermissionDenied(
                f"only admins may submit {band.name} jobs; choose INTERACTIVE or BATCH", field="priority"
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
        raise OverLimit(
            f"replicas: {request.replicas:,} exceeds the limit of {settings.MAX_REPLICAS_PER_JOB:,} tasks per job "
            f"(IRIS_MAX_REPLICAS_PER_JOB)",
            field="replicas", details={"limit": settings.MAX_REPLICAS_PER_JOB},
        )
    if serialise_user:
        hold_until_commit(f"submissions:{user}")
    unfinished = Task.objects.filter(job__user=user, state__in=NON_TERMINAL_VALUES)
    # Counting stops past what the cap allows, so a user's long history costs nothing extra;
    # only a refusal counts them all, for its message.
    allowed = settings.MAX_ACTIVE_TASKS_PER_USER - request.replicas
    if allowed < 0 or unfinished.values("pk")[: allowed + 1].count() > allowed:
        active = unfinished.count()
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
    """The client's argv as stored for audit, only when a client sent one (the console and
    scripts send none; ``Job.request`` records what they asked). The system reason is always in it."""
    argv = list(request.argv)
    if argv and request.system_reason and request.system_reason not in argv:
        argv += ["--system-reason", request.system_reason]
    return argv


def capacity_warnings(request: JobRequest) -> list[str]:
    """Why no registered worker could ever run one task of this job, or nothing.

    The job is accepted anyway (workers come and go, a TPU scale group or Kubernetes may supply
    one); the warning names the largest worker of the kind it asks for. Constraints are not
    weighed here: why a job with them waits is the explanation's business. One query when a
    worker fits (whatever the number of workers), up to four when none does.
    """
    device = request.device
    config = cluster_config()
    if device.type is not DeviceType.CPU:
        if device.type is DeviceType.TPU and any(g.device_variant == device.variant for g in config.scale_groups):
            return []
        if config.kubernetes.enabled and device.type.value in config.kubernetes.device_types:
            return []
    elif config.kubernetes.enabled and "cpu" in config.kubernetes.device_types:
        return []

    def fits(workers) -> bool:
        workers = workers.filter(cpu_millicores__gte=request.cpu_millicores, memory_bytes__gte=request.memory_bytes)
        if device.type is not DeviceType.CPU:
            workers = workers.filter(device_count__gte=device.count)
        return workers.exists()

    if device.type is DeviceType.CPU:
        # CPU work may run on any worker, accelerator hosts included, as the scheduler places it.
        kind, matching = "host", Worker.objects.all()
        if fits(matching):
            return []
    else:
        label = device.type.value.upper()
        any_variant = device.variant == ANY_VARIANT
        kind = f"{label} host" if any_variant else f"{label} {device.variant} host"
        matching = Worker.objects.filter(device_type=device.type.value)
        if not any_variant:
            matching = matching.filter(device_variant=device.variant)
        if fits(matching):
            return []
    order = ("-cpu_millicores", "-memory_bytes") if device.type is DeviceType.CPU else (
        "-device_count", "-cpu_millicores", "-memory_bytes")
    largest = matching.order_by(*order).values_list(
        "cpu_millicores", "memory_bytes", "device_count").first()
    asked = f"{format_cores(request.cpu_millicores)}, {format_memory(request.memory_bytes)}"
    if device.type is not DeviceType.CPU:
        asked += f", {device.count} chips"
    if largest is None:
        return [f"no registered worker could run a task of this job ({asked}): there is no {kind}. "
                f"It waits until one registers."]
    has = f"{format_cores(largest[0])}, {format_memory(largest[1])}"
    if device.type is not DeviceType.CPU:
        has += f", {largest[2]} chips"
    return [f"no registered worker could run a task of this job ({asked}); largest {kind}: {has}. "
            f"It waits until a large enough worker registers."]


@instruments.counted_submissions
def submit_job(actor, request: JobRequest | Mapping[str, Any]) -> Job:
    """Submit a job: check every rule, then write the job and one task per replica atomically.

    A rejected submission writes nothing. After commit a prompt tick is requested; a broker
    outage is logged and never fails the submission (beat ticks anyway). ``job.warnings`` lists
    what the caller should know about an accepted job (:func:`capacity_warnings`).
    """
    if not isinstance(request, JobRequest):
        request = parse_job_request(request)
    try:
        with transaction.atomic():
            plan = plan_submission(actor, request, serialise_user=True)
            submitted = next_submission_ms(clock.now_ms())
            parent = plan.parent
            job = Job.objects.create(
                route=route_at_submission(request),
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
                request=request.as_json(),
                system_reason=request.system_reason,
            )
            job.new_tasks = Task.objects.bulk_create(
                [Task(job=job, index=i, state=TaskState.PENDING.value) for i in range(request.replicas)],
                batch_size=1000,
            )
            transaction.on_commit(request_prompt_tick, robust=True)
    except IntegrityError:
        # Two submissions of the same id raced past the existence check.
        raise FailedPrecondition(f"job {plan.job_id} already exists; choose another name", field="name") from None
    job.warnings = capacity_warnings(request)
    log.info("job %s submitted by %s as %s (%d tasks)", job.name, actor.username, plan.band.name, job.replicas,
             extra={"job": job.name, "actor": actor.username, "user": plan.user, "band": plan.band.wire,
                    "tasks": job.replicas, "action": "job.submit"})
    return job


def route_at_submission(request: JobRequest) -> str:
    """The job's route when it does not depend on the cluster's workers, else "" (the first tick
    routes it): see :func:`scheduler.core.kueue.settled_route`."""
    kube = cluster_config().kubernetes
    accepted = frozenset(DeviceType(d) for d in kube.device_types) if kube.enabled else frozenset()
    return settled_route(request.device.type, pinned_backend_in(request.constraints), accepted) or ""


def request_prompt_tick() -> None:
    """Ask Celery for a tick now, unless one already asked for has not started yet (it will
    see this job: this runs after commit, and a tick forgets the request before it reads the
    cluster). The tick starts at least IRIS_PROMPT_TICK_MIN_INTERVAL_MS after the previous one
started. Never raises (the broker may be down, and beat's next tick picks the job up)."""
    request_once(
        PROMPT_TICK,
        expires=float(settings.TICK_SECONDS),
        min_interval=settings.PROMPT_TICK_MIN_INTERVAL_MS / 1000,
        logger=log,
        failure="could not enqueue a prompt tick; the next scheduled tick will place the job",
    )
