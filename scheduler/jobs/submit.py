"""Submitting a job: every submission rule (:func:`plan_submission`), then the job and its tasks
written in one transaction (:func:`submit_job`), and a prompt tick requested after commit.

No global lock: submissions of one budget identity are serialised (its unfinished-task cap),
and submission times come from the submission clock (``scheduler.store.submission_order``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.base import DEFERRED
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.foundation.access import owns_job, require_authenticated
from scheduler.backends import admissions, admitting_names
from scheduler.budgets.rules import effective_budget_for, effective_budget_of
from scheduler.foundation.cluster_config import cluster_config
from scheduler.core.bands import ADMIN_BANDS, Band
from scheduler.core.explain import format_cores, format_memory
from scheduler.core.kueue import pinned_backend_in, settled_route
from scheduler.core.types import ANY_VARIANT, DeviceType, JobState, TaskState
from scheduler.events.record import record, staged_fields, submitted
from scheduler.jobs.prompt_tick import request_prompt_tick
from scheduler.foundation.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OverLimit,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
)
from scheduler.foundation.inputs import parse_segment
from scheduler.jobs.batch_items import batch_error, parse_batch
from scheduler.jobs.request import JobRequest, parse_job_request
from scheduler.jobs.token_ahead import TokenCheck, Unverified
from scheduler.models import MAX_ID_LENGTH, Job, Task, Worker
from scheduler.foundation import instruments
from scheduler.store import clock
from scheduler.store.locks import hold_until_commit, lock_statement
from scheduler.store import bulk, prepared, submission_rows
from scheduler.store.submission_order import next_submission_ms, next_submission_times
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


def _resolve_job_id(actor, request: JobRequest, lookups: RuleLookups) -> tuple[str, Job | None, str]:
    """The new job's id, its parent row and its budget identity, with ownership checked."""
    name = request.name
    parent_id = request.parent
    if name.startswith("/"):
        if parent_id:
            raise InvalidArgument(
                "give either a full id '/<user>/<name>' or a parent and a one-segment name", field="name"
            )
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
    parent = lookups.parent(parent_id)
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


class RuleLookups:
    """What the submission rules read from the database, each read once per submission or batch.

    One submission reads one parent, one budget, one count and one id; a batch of a thousand
    jobs of one user and one parent reads the same, plus one query for all of the batch's ids.
    The cap (``IRIS_MAX_ACTIVE_TASKS_PER_USER``) counts the batch's earlier jobs of the same
    budget identity (``counted``), and an id is taken once in the batch as in the table.
    """

    def __init__(self, token_check: TokenCheck | None = None) -> None:
        # A token check to send with the lock and the reads (PostgreSQL): its user is ``actor``
        # once they have been read.
        self.token_check = token_check
        self.actor = None
        self._parents: dict[str, Job | None] = {}
        self._budgets: dict[str, Any] = {}
        self._unfinished: dict[str, int] = {}
        self._existing: set[str] | None = None
        self.counted: dict[str, int] = {}  # replicas of the batch's accepted jobs, per budget identity
        self.taken: dict[str, int] = {}  # the batch's accepted job ids -> their item index
        self.fits: bool | None = None  # whether a registered worker fits the job, when read with the rules

    def parent(self, job_id: str) -> Job | None:
        if job_id not in self._parents:
            self._parents[job_id] = Job.objects.filter(name=job_id).first()
        return self._parents[job_id]

    def budget(self, user: str):
        if user not in self._budgets:
            self._budgets[user] = effective_budget_for(user)
        return self._budgets[user]

    def unfinished(self, user: str) -> int:
        """The identity's unfinished tasks, counted up to one past the cap (so a long history
        costs nothing extra): the cap is then exceeded exactly when the count allows no more."""
        if user not in self._unfinished:
            rows = _unfinished_tasks(user).values("pk")[: settings.MAX_ACTIVE_TASKS_PER_USER + 1]
            self._unfinished[user] = rows.count()
        return self._unfinished[user]

    def lock_and_read_for(
        self, user: str, job_id: str, capacity: submission_rows.WorkerQuestion | None = None, adding: int = 0
    ) -> None:
        """Take the identity's submission lock (until commit), then read all one submission's
        rules read about ``user`` and ``job_id`` (budget, unfinished tasks, the id taken?) and
        with ``capacity`` whether a registered worker fits (``fits``: the capacity warning);
        ``adding``: the new job's replicas, which the unfinished tasks may be bounded for. On
        PostgreSQL: two prepared statements in one round trip with BEGIN; elsewhere the
        database's own lock, and each read made when first asked."""
        lock = f"submissions:{user}"
        if connection.vendor != "postgresql":
            hold_until_commit(lock)
            return
        limit = settings.MAX_ACTIVE_TASKS_PER_USER + 1
        at, after = timezone.now(), lock_statement(lock)
        check = self.token_check
        if check is not None:
            after = prepared.Ahead([check.statement, after])
        reads = submission_rows.rule_reads(
            user, job_id, count_up_to=limit, adding=adding, at=at, capacity=capacity, after=after
        )
        if check is not None:
            self.actor = check.verify(after.rows[0])
        self._budgets[user] = effective_budget_of(user, reads.budget_row, reads.grants)
        self._unfinished[user] = reads.unfinished
        self._existing = {job_id} if reads.id_taken else set()
        self.fits = reads.worker_fits

    def prefetch_existing(self, job_ids: list[str]) -> None:
        """One query for whether any of these ids is taken (a batch's); unset, each id is looked up."""
        self._existing = submission_rows.taken_names(job_ids)

    def exists(self, job_id: str) -> bool:
        if self._existing is not None:
            return job_id in self._existing
        return Job.objects.filter(name=job_id).exists()


def _unfinished_tasks(user: str):
    # The job's state as well: an unfinished task's job is never finished (a cancel or a job's
    # end finishes its tasks in the same transaction), and the (finished_state, user) index then
    # finds the user's live jobs instead of every job of their history.
    return Task.objects.filter(job__finished_state__isnull=True, job__user=user, state__in=NON_TERMINAL_VALUES)


@dataclass(frozen=True)
class _Identity:
    job_id: str
    parent: Job | None
    user: str


def _identity(actor, request: JobRequest, lookups: RuleLookups) -> _Identity:
    """Rule 1, identity and ownership: the id, the parent and the budget identity."""
    job_id, parent, user = _resolve_job_id(actor, request, lookups)
    if len(job_id) > MAX_ID_LENGTH - 8:  # leaves room for "/<task index>"
        raise InvalidArgument(f"job id {job_id!r} is too long", field="name")
    return _Identity(job_id, parent, user)


def _apply_rules(actor, request: JobRequest, who: _Identity, lookups: RuleLookups, index: int = 0) -> SubmissionPlan:
    """Rules 2 and 3 (band, limits) and the id being free, for one job whose identity passed.
    The caller holds the identity's submission lock when it is about to write."""
    job_id, parent, user = who.job_id, who.parent, who.user
    band = request.priority if request.priority is not None else (Band(parent.band) if parent else Band.INTERACTIVE)
    effective = lookups.budget(user)
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
        raise PermissionDenied(
            max_band_message(user, band, effective.max_band),
            field="priority",
            details={"user": user, "band": band.wire, "max_band": effective.max_band.wire},
        )

    if request.replicas > settings.MAX_REPLICAS_PER_JOB:
        raise OverLimit(
            f"replicas: {request.replicas:,} exceeds the limit of {settings.MAX_REPLICAS_PER_JOB:,} tasks per job "
            f"(IRIS_MAX_REPLICAS_PER_JOB)",
            field="replicas",
            details={"limit": settings.MAX_REPLICAS_PER_JOB},
        )
    earlier = lookups.counted.get(user, 0)
    if lookups.unfinished(user) + earlier + request.replicas > settings.MAX_ACTIVE_TASKS_PER_USER:
        active = _unfinished_tasks(user).count()  # only a refusal counts them all, for its message
        in_batch = f" (and {earlier:,} in this batch's earlier jobs)" if earlier else ""
        raise ResourceExhausted(
            f"'{user}' has {active} unfinished tasks{in_batch}; {request.replicas} more would exceed the limit of "
            f"{settings.MAX_ACTIVE_TASKS_PER_USER} per user. Wait for work to finish or cancel some.",
            field="replicas",
            details={
                "active_tasks": active,
                "limit": settings.MAX_ACTIVE_TASKS_PER_USER,
                **({"batch_tasks": earlier} if earlier else {}),
            },
        )
    if job_id in lookups.taken:
        raise FailedPrecondition(
            f"job {job_id} is already item {lookups.taken[job_id]} of this batch; choose another name",
            field="name",
            details={"other_index": lookups.taken[job_id]},
        )
    if lookups.exists(job_id):
        raise FailedPrecondition(f"job {job_id} already exists; choose another name", field="name")
    lookups.counted[user] = earlier + request.replicas
    lookups.taken[job_id] = index
    return SubmissionPlan(
        job_id=job_id,
        user=user,
        band=band,
        parent=parent,
        depth=job_id.count("/") - 1,
        request=request,
        budget_max_band=effective.max_band,
    )


def plan_submission(
    actor, request: JobRequest, *, serialise_user: bool = False, lookups: RuleLookups | None = None
) -> SubmissionPlan:
    """Apply every submission rule without writing; raise the first rule broken.

    Order (as Iris): identity and ownership, band, limits, then the job id being free.
    ``serialise_user`` (a submission about to write) first waits for the budget identity's other
    submissions to commit, so the unfinished-task cap counts them, and reads with the rules
    whether a registered worker fits the job (``lookups.fits``, for its capacity warning).
    """
    require_authenticated(actor)
    lookups = lookups if lookups is not None else RuleLookups()
    who = _identity(actor, request, lookups)
    if serialise_user:
        lookups.lock_and_read_for(who.user, who.job_id, capacity_question(request), request.replicas)
        if lookups.actor is not None:  # the user a token check sent with the reads confirmed
            actor = lookups.actor
    return _apply_rules(actor, request, who, lookups)


def plan_submissions(actor, requests: Sequence[JobRequest | ServiceError]) -> list[SubmissionPlan | ServiceError]:
    """Every rule of :func:`plan_submission` for each job of a batch, in order, about to write:
    each item's plan or the first rule it broke (an item already refused, e.g. by its parser,
    stays refused and counts for nothing). Earlier accepted jobs count toward the cap and take
    their ids. The budget identities' submission locks are taken once each, in name order (so two
    batches never wait for each other in a cycle), before anything is counted."""
    require_authenticated(actor)
    lookups = RuleLookups()
    who: list[_Identity | ServiceError] = []
    for request in requests:
        if isinstance(request, ServiceError):
            who.append(request)
            continue
        try:
            who.append(_identity(actor, request, lookups))
        except ServiceError as exc:
            who.append(exc)
    identities = [w for w in who if isinstance(w, _Identity)]
    for user in sorted({w.user for w in identities}):
        hold_until_commit(f"submissions:{user}")
    lookups.prefetch_existing([w.job_id for w in identities])
    plans: list[SubmissionPlan | ServiceError] = []
    for index, (request, w) in enumerate(zip(requests, who, strict=True)):
        if isinstance(w, ServiceError):
            plans.append(w)
            continue
        try:
            plans.append(_apply_rules(actor, request, w, lookups, index))
        except ServiceError as exc:
            plans.append(exc)
    return plans


def submission_argv(request: JobRequest) -> list[str]:
    """The client's argv as stored for audit, only when a client sent one (the console and
    scripts send none; ``Job.request`` records what they asked). The system reason is always in it."""
    argv = list(request.argv)
    if argv and request.system_reason and request.system_reason not in argv:
        argv += ["--system-reason", request.system_reason]
    return argv


def capacity_question(request: JobRequest) -> submission_rows.WorkerQuestion | None:
    """What a registered worker must have for :func:`capacity_warnings` to say nothing, or None
    when no worker need be registered (a TPU scale group or Kubernetes supplies this kind)."""
    device = request.device
    config = cluster_config()
    if device.type is not DeviceType.CPU:
        if device.type is DeviceType.TPU and any(g.device_variant == device.variant for g in config.scale_groups):
            return None
        if config.kubernetes.enabled and device.type.value in config.kubernetes.device_types:
            return None
    elif config.kubernetes.enabled and "cpu" in config.kubernetes.device_types:
        return None
    if device.type is DeviceType.CPU:
        # CPU work may run on any worker, accelerator hosts included, as the scheduler places it.
        return submission_rows.WorkerQuestion(request.cpu_millicores, request.memory_bytes)
    return submission_rows.WorkerQuestion(
        request.cpu_millicores,
        request.memory_bytes,
        device_type=device.type.value,
        variant=None if device.variant == ANY_VARIANT else device.variant,
        count=device.count,
    )


def capacity_warnings(request: JobRequest, *, fits: bool | None = None) -> list[str]:
    """Why no registered worker could ever run one task of this job, or nothing.

    The job is accepted anyway (workers come and go, a TPU scale group or Kubernetes may supply
    one); the warning names the largest worker of the kind it asks for. Constraints are not
    weighed here: why a job with them waits is the explanation's business. One query when a
    worker fits (whatever the number of workers), up to four when none does; none when a
    worker fits and ``fits`` (the answer to :func:`capacity_question`, read by the caller) says so.
    """
    question = capacity_question(request)
    if question is None:
        return []
    if fits is None:
        fits = submission_rows.worker_fits(question)
    if fits:
        return []
    device = request.device
    if device.type is DeviceType.CPU:
        kind, matching = "host", Worker.objects.all()
    else:
        label = device.type.value.upper()
        kind = f"{label} host" if question.variant is None else f"{label} {device.variant} host"
        matching = Worker.objects.filter(device_type=device.type.value)
        if question.variant is not None:
            matching = matching.filter(device_variant=device.variant)
    order = (
        ("-cpu_millicores", "-memory_bytes")
        if device.type is DeviceType.CPU
        else ("-device_count", "-cpu_millicores", "-memory_bytes")
    )
    largest = matching.order_by(*order).values_list("cpu_millicores", "memory_bytes", "device_count").first()
    asked = f"{format_cores(request.cpu_millicores)}, {format_memory(request.memory_bytes)}"
    if device.type is not DeviceType.CPU:
        asked += f", {device.count} chips"
    if largest is None:
        return [
            f"no registered worker could run a task of this job ({asked}): there is no {kind}. "
            f"It waits until one registers."
        ]
    has = f"{format_cores(largest[0])}, {format_memory(largest[1])}"
    if device.type is not DeviceType.CPU:
        has += f", {largest[2]} chips"
    return [
        f"no registered worker could run a task of this job ({asked}); largest {kind}: {has}. "
        f"It waits until a large enough worker registers."
    ]


# Read once: an enum member's ``.value`` is a descriptor call, and a batch asks a thousand times.
_PENDING_JOB, _PENDING_TASK = JobState.PENDING.value, TaskState.PENDING.value


def _job_fields(submitted_by: int | None, plan: SubmissionPlan, submitted: int) -> dict[str, Any]:
    """The Job row of a planned submission stamped ``submitted``, as column values by attribute
    name: one mapping for the single path and the batch path (rows)."""
    return {**_untimed_fields(submitted_by, plan), **_timed_fields(plan, submitted)}


def _deadline_after_ms(request: JobRequest) -> int | None:
    """How long after its submission time a job's scheduling deadline falls, or None."""
    timeout = request.scheduling_timeout_seconds
    return round(timeout * 1000) if timeout else None


def _timed_fields(plan: SubmissionPlan, submitted: int) -> dict[str, Any]:
    """The columns that follow from the submission time ``submitted``."""
    after = _deadline_after_ms(plan.request)
    return {
        "submitted_at_ms": submitted,
        "root_submitted_at_ms": plan.parent.root_submitted_at_ms if plan.parent else submitted,
        "scheduling_deadline_ms": None if after is None else submitted + after,
    }


def _untimed_fields(submitted_by: int | None, plan: SubmissionPlan) -> dict[str, Any]:
    """Every column of the Job row but the submission time and the two that follow from it."""
    request, parent = plan.request, plan.parent
    return {
        "route": route_at_submission(request),
        "name": plan.job_id,
        "parent_id": parent.pk if parent else None,
        "user": plan.user,
        "submitted_by_id": submitted_by,
        "band": int(plan.band),
        "state": _PENDING_JOB,
        "depth": plan.depth,
        **request.job_columns(),
        "submission_argv": submission_argv(request),
    }


@dataclass(frozen=True)
class SubmittedJob:
    """A job a batch wrote, as its answer reports it."""

    id: str
    pk: int
    user: str
    band: Band
    replicas: int
    submitted_at_ms: int
    warnings: list[str]


def _log_submitted(by: str, job_id: str, user: str, band: Band, tasks: int) -> None:
    log.info(
        "job %s submitted by %s as %s (%d tasks)",
        job_id,
        by,
        band.name,
        tasks,
        extra={"job": job_id, "actor": by, "user": user, "band": band.wire, "tasks": tasks, "action": "job.submit"},
    )


@instruments.counted_submissions
def submit_job(actor, request: JobRequest | Mapping[str, Any], *, token_check: TokenCheck | None = None) -> Job:
    """Submit a job: check every rule, then write the job and one task per replica atomically.

    A rejected submission writes nothing. After commit a prompt tick is requested; a broker
    outage is logged and never fails the submission (beat ticks anyway). ``job.warnings`` lists
    what the caller should know about an accepted job (:func:`capacity_warnings`).

    With ``token_check`` (PostgreSQL, a job with no parent and a one-segment name), ``actor`` is
    the user the request's token is guessed to be, and the check of the token goes in the round
    trip of the lock and the rule reads; the job is then ``token_check.actor``'s. If that check
    fails, or anything fails before it, :class:`Unverified` is raised and nothing is counted.
    """
    if not isinstance(request, JobRequest):
        request = parse_job_request(request)
    if token_check is not None and (request.parent is not None or request.name.startswith("/")):
        raise Unverified("the budget identity is not the token's user alone")
    lookups = RuleLookups(token_check)
    try:
        with transaction.atomic():
            plan = plan_submission(actor, request, serialise_user=True, lookups=lookups)
            if token_check is not None and not token_check.verified:
                raise Unverified("the token was not checked with the reads")
            actor = lookups.actor or actor
            job = _write_job(actor, plan, lookups.unfinished(plan.user))
            transaction.on_commit(request_prompt_tick, robust=True)
    except ServiceError:
        if token_check is not None and not token_check.verified:
            raise Unverified("a rule failed before the token was checked") from None
        raise
    except IntegrityError:
        # Two submissions of the same id raced past the existence check.
        raise FailedPrecondition(f"job {plan.job_id} already exists; choose another name", field="name") from None
    # On PostgreSQL whether a worker fits was read with the rules (one statement fewer); the
    # warning's wording, when none fits, is read now.
    job.warnings = capacity_warnings(request, fits=lookups.fits)
    _log_submitted(actor.username, job.name, plan.user, plan.band, job.replicas)
    return job


_TASK_JOB = Task._meta.get_field("job")


def _written(model, alias: str, values: dict[str, Any]):
    """The instance of a row just written on ``alias``: ``model(**values)`` (each field not in
    ``values``, by attribute name, at its default; a generated one left unread, as there) as
    Django builds a row it read, positionally (``from_db``: a third of the keyword path's CPU,
    issue 26 ``submit37``)."""
    return model.from_db(
        alias,
        None,
        [
            values[f.attname] if f.attname in values else DEFERRED if f.generated else f.get_default()
            for f in model._meta.concrete_fields
        ],
    )


def _write_job(actor, plan: SubmissionPlan, unfinished: int) -> Job:
    """The write step of one submission: a submission time from the submission clock, the Job
    row, one Task per replica and the job's ``submitted`` event (staged in the same transaction).
    On PostgreSQL that is one prepared statement (``store.submission_rows``), sent with the COMMIT;
    elsewhere the model instances are saved and the event recorded. ``unfinished``: the identity's
    unfinished tasks before this job, at most, as the rules read them (on PostgreSQL the statement
    keeps that plus this job's replicas as the identity's ``SubmissionBound``). Either way the rows come back
    as model instances (``job.new_tasks``, the parent and the submitter in hand), for the answer."""
    request = plan.request
    fields = _untimed_fields(actor.pk, plan)
    if connection.vendor == "postgresql":
        now = timezone.now()
        pk, submitted_ms, task_ids = submission_rows.insert_job_with_tasks(
            fields,
            now_ms=clock.now_ms(),
            root_submitted_at_ms=plan.parent.root_submitted_at_ms if plan.parent else None,
            deadline_after_ms=_deadline_after_ms(request),
            replicas=request.replicas,
            task_state=_PENDING_TASK,
            created_at=now,
            event=staged_fields(submitted(plan, now)),
            bound=(plan.user, unfinished + request.replicas),
            commit=True,  # submit_job's transaction runs nothing after it: its COMMIT goes along
        )
        alias = connection.alias
        job = _written(Job, alias, {"id": pk, "created_at": now, **fields, **_timed_fields(plan, submitted_ms)})
        job.parent, job.submitted_by = plan.parent, actor
        tasks = []
        for index, task_id in enumerate(task_ids):
            task = _written(
                Task, alias, {"id": task_id, "job_id": pk, "index": index, "state": _PENDING_TASK, "updated_at": now}
            )
            _TASK_JOB.set_cached_value(task, job)
            tasks.append(task)
        job.new_tasks = tasks
        return job
    job = Job(**fields, **_timed_fields(plan, next_submission_ms(clock.now_ms())))
    job.parent, job.submitted_by = plan.parent, actor  # the rows in hand, for the answer
    job.save(force_insert=True)
    job.new_tasks = Task.objects.bulk_create(
        [Task(job=job, index=i, state=_PENDING_TASK) for i in range(request.replicas)], batch_size=1000
    )
    record([submitted(plan, timezone.now())])
    return job


# The columns of a new task row (the others are NULL: no worker, no stamped band yet).
_TASK_COLUMNS = [
    ("job_id", "bigint"),
    ('"index"', "integer"),
    ("state", "text"),
    ("preemption_count", "integer"),
    ("failure_count", "integer"),
    ("attempt_count", "integer"),
    ("updated_at", "timestamptz"),
]


def submit_jobs(actor, bodies: Any) -> list[SubmittedJob]:
    """Submit a batch of jobs (a sweep) all or nothing, by the rules of :func:`submit_job`.

    Every item is parsed by the one job-request model and checked by the same rules; the cap
    counts the batch's earlier jobs, and an id is taken once. If any item is refused nothing is
    written and :func:`batch_error` says which. Otherwise every job and every task go in with one
    statement per table, in one transaction, with consecutive submission times in item order,
    and one prompt tick is requested after commit. Each job's ``warnings`` are those
    ``submit_job`` gives.
    """
    require_authenticated(actor)
    requests = parse_batch(bodies)
    try:
        with transaction.atomic():
            plans = plan_submissions(actor, requests)
            refused = [(i, p) for i, p in enumerate(plans) if isinstance(p, ServiceError)]
            if refused:
                for _, exc in refused:
                    instruments.SUBMISSIONS.labels(code=exc.code).inc()
                raise batch_error(refused)
            first = next_submission_times(clock.now_ms(), len(plans))
            now = timezone.now()
            columns = bulk.model_columns(Job)
            submitter = actor.pk
            attnames = [attname for _, _, attname in columns]
            rows = []
            for i, plan in enumerate(plans):
                fields = _job_fields(submitter, plan, first + i)
                fields["created_at"] = now
                rows.append(tuple(map(fields.get, attnames)))
            ids = dict(
                bulk.insert_returning(
                    Job._meta.db_table, [(c, t) for c, t, _ in columns], rows, returning=("name", "id")
                )
            )
            bulk.insert_rows(
                Task._meta.db_table,
                _TASK_COLUMNS,
                [
                    (ids[plan.job_id], i, _PENDING_TASK, 0, 0, 0, now)
                    for plan in plans
                    for i in range(plan.request.replicas)
                ],
            )
            record(submitted(plan, now) for plan in plans)
            transaction.on_commit(request_prompt_tick, robust=True)
    except IntegrityError:
        # A submission of one of these ids raced past the existence check.
        raise FailedPrecondition(
            "a job id of this batch was taken while it was written; nothing was submitted", field="jobs"
        ) from None
    warnings: dict[tuple, list[str]] = {}
    jobs = []
    by = actor.username
    for i, plan in enumerate(plans):
        request = plan.request
        shape = (request.cpu_millicores, request.memory_bytes, request.device)
        if shape not in warnings:
            warnings[shape] = capacity_warnings(request)
        jobs.append(
            SubmittedJob(
                id=plan.job_id,
                pk=ids[plan.job_id],
                user=plan.user,
                band=plan.band,
                replicas=request.replicas,
                submitted_at_ms=first + i,
                warnings=warnings[shape],
            )
        )
        _log_submitted(by, plan.job_id, plan.user, plan.band, request.replicas)
    instruments.SUBMISSIONS.labels(code="OK").inc(len(jobs))
    log.info(
        "batch of %d jobs submitted by %s",
        len(jobs),
        actor.username,
        extra={"actor": actor.username, "jobs": len(jobs), "action": "job.submit_batch"},
    )
    return jobs


def route_at_submission(request: JobRequest) -> str:
    """The job's route when it does not depend on the cluster's workers, else "" (the first tick
    routes it): see :func:`scheduler.core.kueue.settled_route`."""
    admitting = tuple((a.route, a.device_types) for a in admissions())
    pinned = pinned_backend_in(request.constraints, admitting_names())
    return settled_route(request.device.type, pinned, admitting) or ""
