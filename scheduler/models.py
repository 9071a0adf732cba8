"""ORM models: fields, constraints and indexes. No scheduling policy lives here.

The policy is in ``scheduler.core``; ``scheduler.tick.load`` turns these rows into core types.
Bands are stored as their rank (SYSTEM=0 ... BATCH=3) so SQL ordering matches scheduling order.
Times the scheduler compares (submission, deadlines) are integer epoch milliseconds, as in the
core; human-facing audit times are datetimes.
"""

from __future__ import annotations

import json
import zlib

import orjson
from isal import isal_zlib
from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken

from scheduler.core.bands import Band
from scheduler.core.types import ACTIVE_STATES, TERMINAL_JOB_STATES, DeviceType, JobState, TaskState

BAND_CHOICES = [(b.value, b.name) for b in Band]
TASK_STATE_CHOICES = [(s.value, s.name) for s in TaskState]
JOB_STATE_CHOICES = [(s.value, s.name) for s in JobState]
FINISHED_JOB_VALUES = sorted(s.value for s in TERMINAL_JOB_STATES)
DEVICE_CHOICES = [(d.value, d.name) for d in DeviceType]

MAX_ID_LENGTH = 255


def compress_json(value) -> bytes:
    """``value`` as :class:`CompressedJSONField` stores it (so a stored value can be kept and
    written again as it is), compressed by ISA-L: the tick compresses its queue and basis each tick."""
    try:
        raw = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)  # a third of the standard library's time
    except TypeError:  # what orjson refuses (integers beyond 64 bits): the standard library
        raw = json.dumps(value, separators=(",", ":")).encode()
    return isal_zlib.compress(raw, 1)  # a zlib stream (zlib.decompress reads it) at ~40% of zlib's CPU


def decompress_json(data: bytes | memoryview):
    """What :func:`compress_json` stored. Parsed by orjson (the what-if basis's 1.2 MB of JSON at
    10,000 workers: about a quarter of the standard library's time); what orjson refuses but
    ``json.dumps`` writes (NaN, integers beyond 64 bits) is parsed by the standard library."""
    raw = zlib.decompress(bytes(data))
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class CompressedJSONField(models.BinaryField):
    """JSON kept as zlib-compressed bytes: for large documents written often and read rarely.

    The tick's queue explanation is several MB of JSON at 100,000 pending tasks; as ``jsonb``
    PostgreSQL spends over 0.1 s parsing and compressing it on every tick, as compressed bytes
    about a fifth of that. Reads and writes take and give plain Python values.
    """

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is not None and not isinstance(value, (bytes, memoryview)):
            value = compress_json(value)
        return super().get_db_prep_value(value, connection, prepared)

    def from_db_value(self, value, expression, connection):
        if value is None:
            return None
        return decompress_json(value)

    def to_python(self, value):
        if isinstance(value, (bytes, memoryview)):
            return decompress_json(value)
        return value


class UserBudget(models.Model):
    """A user's budget. No row means the cluster's ``budget_defaults`` apply.

    ``user_id`` is the budget identity (the Django username), deliberately not a foreign key:
    tiers from the cluster config may name users before they first sign in.
    """

    user_id = models.CharField(primary_key=True, max_length=150)
    # Resource-value points; 0 means unlimited.
    budget_limit = models.PositiveBigIntegerField(default=0)
    max_band = models.PositiveSmallIntegerField(choices=BAND_CHOICES, default=Band.INTERACTIVE)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user_id}: limit {self.budget_limit}, max {Band(self.max_band).name}"


class Worker(models.Model):
    """A host that runs tasks. Capacity is total; use is derived from tasks and attempts."""

    name = models.CharField(max_length=MAX_ID_LENGTH, unique=True)
    backend = models.CharField(max_length=32, default="local")
    healthy = models.BooleanField(default=True)
    draining = models.BooleanField(default=False)
    cpu_millicores = models.PositiveBigIntegerField()
    memory_bytes = models.PositiveBigIntegerField()
    device_type = models.CharField(max_length=8, choices=DEVICE_CHOICES, default=DeviceType.CPU.value)
    device_variant = models.CharField(max_length=64, blank=True, default="")
    device_count = models.PositiveIntegerField(default=0)
    # Free-form string attributes: tpu-name, tpu-worker-id, region, zone, ...
    attributes = models.JSONField(default=dict, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class Job(models.Model):
    """A submitted job: ``replicas`` identical tasks. ``band`` is the requested band, immutable."""

    name = models.CharField(max_length=MAX_ID_LENGTH, unique=True, help_text="Hierarchical id, e.g. /alice/train")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    # Budget identity: the submitter of the root job. Indexed by job_user_newest (Meta).
    user = models.CharField(max_length=150)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    band = models.PositiveSmallIntegerField(choices=BAND_CHOICES)
    state = models.CharField(max_length=16, choices=JOB_STATE_CHOICES, default=JobState.PENDING.value)
    depth = models.PositiveSmallIntegerField()
    submitted_at_ms = models.BigIntegerField()
    root_submitted_at_ms = models.BigIntegerField()
    replicas = models.PositiveIntegerField(default=1)
    cpu_millicores = models.PositiveBigIntegerField(default=0)
    memory_bytes = models.PositiveBigIntegerField(default=0)
    device_type = models.CharField(max_length=8, choices=DEVICE_CHOICES, default=DeviceType.CPU.value)
    device_variant = models.CharField(max_length=64, blank=True, default="")
    device_count = models.PositiveIntegerField(default=0)
    # Coscheduling: tasks place all-or-nothing on workers sharing this attribute's value.
    group_by = models.CharField(max_length=64, null=True, blank=True)
    # [{"key", "op", "value", "soft"}], as in the snapshot format.
    constraints = models.JSONField(default=list, blank=True)
    scheduling_deadline_ms = models.BigIntegerField(null=True, blank=True)
    max_retries_preemption = models.PositiveIntegerField(default=100)
    max_retries_failure = models.PositiveIntegerField(default=0)
    command = models.JSONField(default=list, blank=True)
    # The client's command line, only where a CLI really sent one (includes --system-reason).
    submission_argv = models.JSONField(default=list, blank=True)
    # The submission as validated (JobRequest.as_json): what was really asked, from any client.
    request = models.JSONField(default=dict, blank=True)
    system_reason = models.CharField(max_length=500, blank=True, default="")
    # The job's route: where its tasks run, stamped by the first tick that sees the job (see
    # scheduler.core.kueue.route_job): "" until then, "workers" (placed by our scheduler on
    # registered workers: local agents, TPU slice hosts) or "kubernetes" (pods admitted by Kueue).
    # Not to be confused with Worker.backend, the backend that runs one worker's attempts.
    route = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The state a finished job ended in, null while the job is live (pending or running): what
    # every index of the state serves, so no index holds ``state`` itself. The tick flips a
    # live job between pending and running at each placement and preemption; an update that
    # changes no indexed value is a heap-only (HOT) update on PostgreSQL, which writes none of
    # the table's indexes (migration 0025: with the change stamp kept on those flips and a
    # fillfactor that leaves each page room for the new row version). Filter "live" as
    # ``finished_state__isnull=True`` and a finished state as ``finished_state=...``.
    finished_state = models.GeneratedField(
        expression=models.Case(
            models.When(state__in=FINISHED_JOB_VALUES, then=models.F("state")), default=models.Value(None)
        ),
        output_field=models.CharField(max_length=16, null=True),
        db_persist=True,
    )

    class Meta:
        # The jobs table (scheduler.jobs.listing): its default order is newest first, and each
        # equality filter (user, requested band, state, route) has an index that leads with it
        # and then serves that order, so a page reads PAGE_SIZE index entries, not the table.
        # The state's indexes lead with ``finished_state`` (see above): a live state's filter
        # reads the live jobs' entries (null first) and checks ``state`` on their rows.
        # (finished_state, user) also serves the spend and the state+user filter sorted by user;
        # job_newest_first also serves the submission clock's read of the newest time.
        indexes = [
            models.Index(fields=["finished_state", "user"], name="job_finished_user"),
            models.Index(fields=["-submitted_at_ms", "-id"], name="job_newest_first"),
            models.Index(fields=["user", "-submitted_at_ms"], name="job_user_newest"),
            models.Index(fields=["band", "-submitted_at_ms"], name="job_band_newest"),
            models.Index(fields=["finished_state", "-submitted_at_ms"], name="job_finished_newest"),
            models.Index(fields=["route", "-submitted_at_ms"], name="job_route_newest"),
            # Keyset pages (listing.page_of) read from a row on by (sort column, id): one index
            # per sortable column, scanned either way (name is unique; submitted is above). The
            # state column's is (finished_state, id), the finished jobs' side of the state sort
            # (listing._state_rows): an index holding ``state`` would defeat the HOT flips above.
            models.Index(fields=["finished_state", "id"], name="job_finished_keyset"),
            models.Index(fields=["user", "id"], name="job_user_keyset"),
            models.Index(fields=["band", "id"], name="job_band_keyset"),
            models.Index(fields=["route", "id"], name="job_route_keyset"),
            models.Index(fields=["replicas", "id"], name="job_replicas_keyset"),
        ]

    def __str__(self) -> str:
        return self.name


class Task(models.Model):
    """One replica of a job. ``band`` is stamped with the effective band at assignment."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks", db_index=False)
    index = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TASK_STATE_CHOICES, default=TaskState.PENDING.value)
    # No database foreign-key constraint: the tick sets thousands of workers at once and holds
    # them itself until commit (as for Attempt, below).
    worker = models.ForeignKey(
        Worker,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tasks",
        db_index=False,
        db_constraint=False,
    )
    band = models.PositiveSmallIntegerField(choices=BAND_CHOICES, null=True, blank=True)
    preemption_count = models.PositiveIntegerField(default=0)
    failure_count = models.PositiveIntegerField(default=0)
    # Number of attempts made so far; the current attempt is the one with this number.
    attempt_count = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # Every index is one more write per row on the tick's hot path: foreign keys have none of
        # their own, and the state's are partial (migration 0035: leaving a state writes none).
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="task_unique_index_per_job")]
        indexes = [
            models.Index(fields=["job"], name="task_pending", condition=models.Q(state=TaskState.PENDING.value)),
            models.Index(
                fields=["worker"],
                name="task_active_by_worker",
                condition=models.Q(state__in=sorted(s.value for s in ACTIVE_STATES)),
            ),
            # The fairness page's starving tasks (tick.fairness.STARVATION_PREEMPTIONS, which a
            # test holds equal to this 3): only tasks preempted more than three times have an
            # entry, so no other task's preemption writes to it.
            models.Index(
                fields=["-preemption_count"], name="task_starving", condition=models.Q(preemption_count__gt=3)
            ),
        ]

    @property
    def name(self) -> str:
        return f"{self.job.name}/{self.index}"

    def __str__(self) -> str:
        return f"task {self.job_id}/{self.index}"


class Attempt(models.Model):
    """One try at running a task on a worker. It holds capacity until ``finished_at`` is set."""

    # No database foreign-key constraints on the rows every placement writes (attempts here,
    # intents below, a task's worker): the tick writes tens of thousands in a burst, and
    # PostgreSQL checks each constraint once per row at commit (a third of a burst tick's
    # writes). The tick itself holds the tasks (FOR UPDATE) and workers (FOR KEY SHARE) it
    # references until commit (scheduler.tick.apply), and deletions go through Django, which
    # cascades or nulls them in Python.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="attempts", db_index=False, db_constraint=False
    )
    number = models.PositiveIntegerField()
    worker = models.ForeignKey(
        Worker,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="attempts",
        db_constraint=False,
        # Every query by worker asks for unfinished attempts (attempt_unfinished_by_worker, Meta); a
        # plain index would be one more write per attempt a burst inserts.
        db_index=False,
    )
    state = models.CharField(max_length=16, choices=TASK_STATE_CHOICES)
    band = models.PositiveSmallIntegerField(choices=BAND_CHOICES)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="attempt_unique_number_per_task")]
        indexes = [
            models.Index(
                fields=["worker"], name="attempt_unfinished_by_worker", condition=models.Q(finished_at__isnull=True)
            )
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of task {self.task_id}"


class TickRecord(models.Model):
    """One scheduling tick: when, how long, what it did, and a spend sample per user."""

    started_at = models.DateTimeField(db_index=True)
    now_ms = models.BigIntegerField()
    duration_ms = models.FloatField()
    decide_ms = models.FloatField(default=0)
    # PENDING tasks at the start of the tick, and those it left pending (the queue it stored:
    # the same number as the sum of its band counts).
    pending = models.PositiveIntegerField(default=0)
    left_pending = models.PositiveIntegerField(default=0)
    assigned = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    expired = models.PositiveIntegerField(default=0)
    # {user: spend points} at the start of the tick, for spend-over-time charts.
    spend = models.JSONField(default=dict)
    # {user: points} the tick's own changes add to ``spend`` (the tasks it started minus those it
    # stopped; users it did not move are left out): ``spend`` plus this is the spend once the
    # tick committed, the spend every page shows (scheduler.budgets.rules.spend_now).
    spend_change = models.JSONField(default=dict)
    # {user: effective budget limit} at the start of the tick (0 = unlimited).
    limits = models.JSONField(default=dict)
    # What the tick saw of fairness, per band per user (scheduler.core.fairness.fairness_sample):
    # kept on every tick, small (users x bands), for the fairness page and its share chart.
    fairness = models.JSONField(default=dict)
    # The latest tick's explanation of the queue (see scheduler.board.formats.explanation_to_json);
    # cleared on older ticks so only one copy is kept.
    explanation = CompressedJSONField(null=True, blank=True)
    # The latest tick's what-if basis (see scheduler.board.formats.whatif_basis_to_json): each
    # worker's free capacity and each band's users with their pending counts, small enough
    # for a web process to read per tick. Cleared on older ticks, as the explanation.
    whatif_basis = CompressedJSONField(null=True, blank=True)
    # A tick that reused the previous decision (nothing it depends on changed) stores neither
    # of the two above: it names the tick that holds them, the same queue and basis, instead of
    # writing several MB again. Readers of the newest tick's queue follow it; pruning never
    # deletes the tick it names (scheduler.tick.history).
    explanation_tick = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        indexes = [
            # The newest tick with a publication (scheduler.board.read.newest_board_tick, on
            # every page): only the newest records hold or name one, which the planner cannot
            # know from the column statistics, so without this it read all of 8 days of records.
            models.Index(
                fields=["id"],
                name="tick_with_publication",
                condition=models.Q(explanation__isnull=False) | models.Q(explanation_tick__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"tick {self.pk} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class PreemptionEvent(models.Model):
    """A victim task evicted so a higher-band preemptor could run."""

    tick = models.ForeignKey(TickRecord, null=True, blank=True, on_delete=models.SET_NULL, related_name="preemptions")
    victim = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="preempted_by_events")
    preemptor = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="preempted_events")
    victim_band = models.PositiveSmallIntegerField(choices=BAND_CHOICES)
    preemptor_band = models.PositiveSmallIntegerField(choices=BAND_CHOICES)
    worker = models.ForeignKey(Worker, null=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=500)
    created_at = models.DateTimeField(db_index=True)
    # Written by the tick with the event, so the history's user filter and the fairness page's
    # lost work read the event alone (not its task, job and attempts; docs/benchmarks.md).
    victim_user = models.CharField(max_length=150)
    # The victim's job, so the history's most preempted jobs group the events alone (not each
    # event's task). Not indexed on its own: a job's events are found through its tasks
    # (``victim__job``), and the window's grouping reads the covering index (migration 0033).
    victim_job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    # The work the eviction lost: the victim's resource value × how long its evicted attempt had
    # run, in point-milliseconds; 0 if that attempt never started.
    lost_point_ms = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["victim_user", "-created_at"], name="preemption_victim_user")]

    def __str__(self) -> str:
        return self.reason


class SchedulerLease(models.Model):
    """A named lease taken by compare-and-set, so two ticks never run at once.

    Beat alone is no guarantee (a slow tick overlaps the next one; two beats may run by
    mistake). The tick renews its lease at each phase boundary and gives it back with its
    commit; a tick that dies leaves it to expire ``TICK_LEASE_SECONDS`` after its last renewal.
    """

    name = models.CharField(primary_key=True, max_length=32)
    holder = models.CharField(max_length=64, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'}"


class UpliftGrant(models.Model):
    """A time-bounded raise of a user's ``max_band`` and/or ``budget_limit``.

    A researcher requests one; an admin approves (which sets ``starts_at``/``expires_at``) or
    denies it. While approved and unexpired, the effective budget is the best of the row (or the
    defaults) and every active grant.
    """

    class State(models.TextChoices):
        REQUESTED = "requested"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"

    user_id = models.CharField(max_length=150, db_index=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    max_band = models.PositiveSmallIntegerField(choices=BAND_CHOICES, null=True, blank=True)
    # Resource-value points; 0 means unlimited; null means "not raised by this grant".
    budget_limit = models.PositiveBigIntegerField(null=True, blank=True)
    reason = models.TextField()
    duration_seconds = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.REQUESTED)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    starts_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["state", "expires_at"])]

    def __str__(self) -> str:
        return f"uplift {self.pk} for {self.user_id} ({self.state})"


class AuditEntry(models.Model):
    """Who changed a budget or a grant, what it was before and after, when and why."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Free text so system actors (config reconciliation, grant expiry) can be named too.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=255)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name_plural = "audit entries"  # Django's default adds an s: "Audit entrys"

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.target}"


class DispatchIntent(models.Model):
    """The outbox: what must be started or stopped where, written in the same transaction as the
    decision that needs it, and delivered after commit. An intent names its attempt by (task,
    attempt number), so delivering it twice is harmless: backends start an attempt at most once.
    Failed deliveries retry with backoff and stay visible to operators. ``intent_fresh``: the never
    tried (all a tick writes), a drain's due read (0036); on PostgreSQL the other two leave them out (0037)."""

    class Kind(models.TextChoices):
        START = "start"
        STOP = "stop"

    class State(models.TextChoices):
        PENDING = "pending"  # not yet handed to the backend (or waiting to retry)
        DELIVERED = "delivered"  # the backend has it (a local agent fetched it, a pod was created)
        DONE = "done"  # the backend confirmed it took effect
        FAILED = "failed"  # gave up after too many tries; an operator must look

    # No database foreign-key constraints, as for Attempt (the tick writes one intent per attempt).
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="intents", db_index=False, db_constraint=False
    )
    attempt_number = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices)
    worker = models.ForeignKey(
        Worker,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="intents",
        db_index=False,
        db_constraint=False,
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=500, blank=True, default="")
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "attempt_number", "kind"], name="intent_once_per_attempt_and_kind")
        ]
        _fresh = models.Q(state="pending", next_try_at__isnull=True)
        indexes = [models.Index(fields=["state", "next_try_at"]), models.Index(fields=["worker", "state"])]
        indexes.append(models.Index(fields=["id"], name="intent_fresh", condition=_fresh))

    def __str__(self) -> str:
        return f"{self.kind} attempt {self.attempt_number} of task {self.task_id} ({self.state})"


class BackendState(models.Model):
    """What the console shows about a cloud backend: enabled, healthy, last sync, last error.

    Written by ``scheduler.provisioning`` after each sync or provisioning pass (and by the tick
    for the Kubernetes promotion token bucket, which lives here so every process shares it).
    """

    name = models.CharField(primary_key=True, max_length=32)
    enabled = models.BooleanField(default=False)
    healthy = models.BooleanField(default=False)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    # Failed passes in a row (0 once a pass succeeds).
    consecutive_errors = models.PositiveIntegerField(default=0)
    # Backend-specific facts for the console (pods seen, slices by state, classes ensured, ...).
    detail = models.JSONField(default=dict, blank=True)
    # Kubernetes promotions: tokens left and when they were counted (epoch ms).
    tokens = models.FloatField(null=True, blank=True)
    tokens_at_ms = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({'healthy' if self.healthy else 'unhealthy'})"


class TpuSlice(models.Model):
    """A TPU slice the provisioner asked for, from request to deletion.

    The row is written before the API is called, so a slice whose creation timed out is still
    known (and deleted if it appears). Failed rows stay as the record of failures, and their
    count since the group's last success sets the group's backoff.
    """

    class State(models.TextChoices):
        CREATING = "creating"  # requested; waiting for the node (or queued resource) to be ready
        READY = "ready"  # its hosts can join as workers
        DRAINING = "draining"  # idle past the timeout: its workers take no new work
        DELETING = "deleting"  # delete requested
        DELETED = "deleted"  # gone
        FAILED = "failed"  # could not be created, or not ready in time

    name = models.CharField(max_length=63, unique=True)
    scale_group = models.CharField(max_length=63, db_index=True)
    zone = models.CharField(max_length=64)
    accelerator_type = models.CharField(max_length=64)
    # "nodes" or "queued_resources": how it was asked for, so it is deleted the same way.
    provisioning = models.CharField(max_length=16, default="nodes")
    state = models.CharField(max_length=16, choices=State.choices, default=State.CREATING)
    operation = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField()
    ready_at = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["scale_group", "state"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


# --- credentials ----------------------------------------------------------------------------------


class ApiToken(AbstractAuthToken):
    """A person's API token (django-rest-knox, ``KNOX_TOKEN_MODEL``): one per device or purpose.

    Only the SHA-512 ``digest`` of the token is stored, and its first 15 characters
    (``token_key``), which knox uses to find the row and the API shows as the token's id; the
    token itself is shown once, when it is minted. ``expiry`` is ``IRIS_TOKEN_TTL_HOURS`` after
    minting; an expired token is refused (and deleted) on use.
    """

    name = models.CharField(
        max_length=100, blank=True, default="", help_text="device or purpose, e.g. 'iris CLI on laptop'"
    )

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.token_key}... of {self.user} ({self.name or 'unnamed'})"


class WorkerCredential(models.Model):
    """The one credential of one worker agent, bound to the worker's name when an operator mints
    it (``manage.py worker_credential``, ``POST workers/{name}:credential``).

    It is not a user: it authenticates only the agent API (``Authorization: Worker <key>``),
    and only as ``worker_name``. Only its SHA-512 ``digest`` is stored. Minting again replaces
    it (the old key stops working); deleting the row revokes it.
    """

    worker_name = models.CharField(max_length=MAX_ID_LENGTH, unique=True)
    digest = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, help_text="who minted it: a username, or manage.py")

    def __str__(self) -> str:
        return f"credential of worker {self.worker_name}"


class EstimatedStart(models.Model):
    """A pending task's estimated start, as the newest estimator run computed it
    (:mod:`scheduler.tick.estimates`; the method is docs/estimates.md).

    Keyed by the task's name (``/alice/train/0``) so the queue page reads a page of them in one
    query; ``job`` (the job's name) serves the job page. ``p50_ms`` and ``p90_ms`` are both set
    or both null; null means there was not enough history, and ``reason`` says why. The whole
    table is replaced by each run.
    """

    task = models.CharField(primary_key=True, max_length=MAX_ID_LENGTH + 12)
    job = models.CharField(max_length=MAX_ID_LENGTH, db_index=True)
    p50_ms = models.BigIntegerField(null=True, blank=True)
    p90_ms = models.BigIntegerField(null=True, blank=True)
    method = models.CharField(max_length=16, blank=True, default="")
    reason = models.CharField(max_length=300, blank=True, default="")
    as_of_ms = models.BigIntegerField()

    def __str__(self) -> str:
        return f"estimated start of {self.task}"


class EstimateWaits(models.Model):
    """The newest estimator run: when (``as_of_ms``), how long it took (``run_ms``, wall: when the
    next is due, ``board.estimates.estimator_schedule``), and each band's observed waits (``{band
    rank: [ms, ...]}`` ascending, thinned) that a shown estimate whose time has passed is
    conditioned on. One row, replaced with the estimates."""

    as_of_ms = models.BigIntegerField()
    waits = models.JSONField(default=dict)
    run_ms = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"estimate waits as of {self.as_of_ms}"


class EventFields(models.Model):
    """What a job or budget event says (``scheduler.events``; its kinds and fields are in
    docs/api.md, "Events"). ``user`` is whose it is (a job's budget identity, a budget's user);
    job events name their job by id (no foreign key: an event outlives a deleted job until
    retention), task events their task's ``task_index`` and ``attempt``."""

    kind = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    user = models.CharField(max_length=150, blank=True, default="")
    job = models.CharField(max_length=MAX_ID_LENGTH, blank=True, default="")
    task_index = models.IntegerField(null=True, blank=True)
    attempt = models.IntegerField(null=True, blank=True)
    tick = models.BigIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        abstract = True


class StagedEvent(EventFields):
    """An event as its change's transaction wrote it, before it is given its place in the
    stream. ``scheduler.events.sequence`` moves committed rows to :class:`Event` in order, under
    one lock, so an :class:`Event` id is never handed out below one a reader has already seen.
    ``data`` is JSON text here, parsed into ``jsonb`` only when the row moves (off the tick's
    path: a burst tick stages tens of thousands)."""

    data = models.TextField(default="{}", blank=True)


class Event(EventFields):
    """A job or budget event in the stream: ``id`` is its place (increasing in the order events
    became visible; resumable with ``since=``)."""

    class Meta:
        indexes = [
            models.Index(fields=["job", "id"], name="scheduler_event_job_id"),
            models.Index(fields=["user", "id"], name="scheduler_event_user_id"),
            models.Index(fields=["kind", "id"], name="scheduler_event_kind_id"),
            models.Index(fields=["created_at"], name="scheduler_event_created"),
        ]

    def __str__(self) -> str:
        return f"event {self.pk} {self.kind} {self.job or self.user}"


# Rows kept in their own modules (this one stays under 700 lines), re-exported for Django.
from scheduler.notification_models import (  # noqa: E402, F401
    NotificationCursor,
    NotificationDelivery,
    NotificationSettings,
)
from scheduler.submission_models import SubmissionBound  # noqa: E402, F401
