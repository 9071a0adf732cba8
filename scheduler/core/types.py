"""Frozen value types the core decides over, and the decision it returns.

These are the only shapes that cross the boundary between the pure core and the Django shell:
``scheduler.tick.load`` builds a :class:`ClusterSnapshot` from rows, ``scheduler.core.wire`` builds
one from JSON, and both hand it to :func:`scheduler.core.decision.decide`.

Names differ on purpose from the ORM models (``JobSpec`` vs ``Job``), so a reader always knows
which world a line lives in. Times are integer milliseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from scheduler.core.bands import Band


class TaskState(str, Enum):
    PENDING = "pending"
    ASSIGNED = "assigned"
    BUILDING = "building"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    WORKER_FAILED = "worker_failed"
    UNSCHEDULABLE = "unschedulable"
    PREEMPTED = "preempted"
    COSCHED_FAILED = "cosched_failed"


# Tasks holding a worker slot and counting towards spend.
ACTIVE_STATES = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})
# ASSIGNED and BUILDING tasks occupy a worker's build slots.
BUILDING_STATES = frozenset({TaskState.ASSIGNED, TaskState.BUILDING})
NON_TERMINAL_STATES = ACTIVE_STATES | {TaskState.PENDING}
TERMINAL_STATES = frozenset(TaskState) - NON_TERMINAL_STATES


class JobState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    UNSCHEDULABLE = "unschedulable"
    PREEMPTED = "preempted"
    COSCHED_FAILED = "cosched_failed"


TERMINAL_JOB_STATES = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.KILLED,
        JobState.UNSCHEDULABLE,
        JobState.PREEMPTED,
        JobState.COSCHED_FAILED,
    }
)


class DeviceType(str, Enum):
    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


# A job asking for this variant accepts any variant of its device type.
ANY_VARIANT = "auto"


@dataclass(frozen=True, slots=True)
class Device:
    """What accelerator a task needs or a worker offers. CPU devices have no variant and count 0."""

    type: DeviceType = DeviceType.CPU
    variant: str | None = None
    count: int = 0

    @property
    def gpu_count(self) -> int:
        return self.count if self.type is DeviceType.GPU else 0

    @property
    def tpu_count(self) -> int:
        return self.count if self.type is DeviceType.TPU else 0


CPU_DEVICE = Device()


@dataclass(frozen=True, slots=True)
class Resources:
    """Per-task request: CPU in millicores, memory in bytes, and a device."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    device: Device = CPU_DEVICE


class ConstraintOp(str, Enum):
    EQ = "eq"
    NE = "ne"
    IN = "in"
    EXISTS = "exists"


@dataclass(frozen=True, slots=True)
class Constraint:
    """A predicate over worker attributes. Hard constraints filter; soft ones rank (1 point each).

    ``value`` is a string for eq/ne, a tuple of strings for in, and None for exists.
    """

    key: str
    op: ConstraintOp
    value: str | tuple[str, ...] | None = None
    soft: bool = False


@dataclass(frozen=True, slots=True)
class BudgetDefaults:
    """What applies to a user with no budget row. ``budget_limit`` 0 means unlimited."""

    budget_limit: int = 1000
    max_band: Band = Band.INTERACTIVE


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Per-tick caps. A value of 0 means unlimited for every cap."""

    # Bounds CPU time per tick on huge jobs; gangs are exempt (they place all-or-nothing).
    max_tasks_per_job_per_cycle: int = 4
    # New assignments one worker may take in one tick.
    max_assignments_per_worker: int = 4
    # Tasks ASSIGNED or BUILDING on one worker at once (image pulls and setup are expensive).
    max_building_tasks: int = 8
    budget_defaults: BudgetDefaults = field(default_factory=BudgetDefaults)


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A user's effective budget (row or defaults, already raised by any active uplift grant)."""

    user: str
    budget_limit: int
    max_band: Band


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """A worker's total capacity. Use is derived from the tasks and attempts bound to it."""

    id: str
    cpu_millicores: int
    memory_bytes: int
    device: Device = CPU_DEVICE
    attributes: Mapping[str, str] = field(default_factory=dict)
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as the scheduler sees it. ``band`` is the requested band, resolved once at submit."""

    id: str
    user: str
    band: Band
    parent: str | None
    submitted_at_ms: int
    root_submitted_at_ms: int
    replicas: int = 1
    resources: Resources = field(default_factory=Resources)
    group_by: str | None = None
    constraints: tuple[Constraint, ...] = ()
    scheduling_deadline_ms: int | None = None
    max_retries_preemption: int = 100
    max_retries_failure: int = 0

    @property
    def depth(self) -> int:
        """``/alice/train`` has depth 1, ``/alice/train/eval`` depth 2."""
        return self.id.count("/") - 1

    @property
    def is_gang(self) -> bool:
        return self.group_by is not None


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """A non-terminal task. ``band`` is the band stamped at assignment (None while pending).

    ``unfinished_attempt_worker`` names a worker that still runs an earlier attempt of this task
    (preempted, failed or lost but not yet confirmed finished): its resources stay committed there.
    """

    id: str
    job_id: str
    index: int
    state: TaskState = TaskState.PENDING
    worker: str | None = None
    band: Band | None = None
    preemption_count: int = 0
    unfinished_attempt_worker: str | None = None


def _filler(cls: type) -> type:
    """A plain class with the slots of the frozen ``cls``, in the same layout. A factory stores
    the fields into one of its instances with plain attribute stores (which the interpreter
    specialises for slots; ``cls`` refuses them) and then makes it a ``cls`` by ``__class__``
    assignment, which Python allows between classes of one layout. The instance comes from
    calling the class (it has no ``__init__``): a third fewer instructions than
    ``object.__new__(filler)``, which goes through the generic ``__new__`` wrapper."""
    return type(f"_{cls.__name__}Filler", (), {"__slots__": cls.__slots__})


_TaskSnapshotFiller: Any = _filler(TaskSnapshot)


def task_snapshot(id, job_id, index, state, worker, band, preemption_count, unfinished_attempt_worker) -> TaskSnapshot:
    """``TaskSnapshot(...)`` in a third of the time, for the 130,000 a whole read builds.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; this fills
    the slots of a :func:`_filler` instance and re-classes it. The result is an ordinary
    ``TaskSnapshot``, equal (and hashing equal) to the constructor's;
    ``tests/core/test_task_snapshot_factory.py`` checks that, and that the fields are still these eight.
    """
    snapshot = _TaskSnapshotFiller()
    snapshot.id = id
    snapshot.job_id = job_id
    snapshot.index = index
    snapshot.state = state
    snapshot.worker = worker
    snapshot.band = band
    snapshot.preemption_count = preemption_count
    snapshot.unfinished_attempt_worker = unfinished_attempt_worker
    snapshot.__class__ = TaskSnapshot
    return snapshot


_JobSpecFiller: Any = _filler(JobSpec)


def job_spec(
    id,
    user,
    band,
    parent,
    submitted_at_ms,
    root_submitted_at_ms,
    replicas,
    resources,
    group_by,
    constraints,
    scheduling_deadline_ms,
    max_retries_preemption,
    max_retries_failure,
) -> JobSpec:
    """``JobSpec(...)`` with every field given, as :func:`task_snapshot` (a read of 100,000
    tasks builds tens of thousands); ``tests/core/test_task_snapshot_factory.py`` checks it
    against the constructor and the fields."""
    job = _JobSpecFiller()
    job.id = id
    job.user = user
    job.band = band
    job.parent = parent
    job.submitted_at_ms = submitted_at_ms
    job.root_submitted_at_ms = root_submitted_at_ms
    job.replicas = replicas
    job.resources = resources
    job.group_by = group_by
    job.constraints = constraints
    job.scheduling_deadline_ms = scheduling_deadline_ms
    job.max_retries_preemption = max_retries_preemption
    job.max_retries_failure = max_retries_failure
    job.__class__ = JobSpec
    return job


_WorkerSpecFiller: Any = _filler(WorkerSpec)


def worker_spec(id, cpu_millicores, memory_bytes, device, attributes, healthy) -> WorkerSpec:
    """``WorkerSpec(...)`` with every field given, as :func:`task_snapshot` (a read of 10,000
    workers builds 10,000); ``tests/core/test_task_snapshot_factory.py`` checks it against the
    constructor and the fields."""
    worker = _WorkerSpecFiller()
    worker.id = id
    worker.cpu_millicores = cpu_millicores
    worker.memory_bytes = memory_bytes
    worker.device = device
    worker.attributes = attributes
    worker.healthy = healthy
    worker.__class__ = WorkerSpec
    return worker


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A TPU scale group as the core needs it (``scheduler.foundation.cluster_config.ScaleGroup``): what
    slices it creates (``variant``, ``hosts_per_slice`` hosts of ``chips_per_host`` chips, in
    ``zone``) and how many it may have."""

    name: str
    variant: str
    zone: str
    min_slices: int = 0
    max_slices: int = 1
    hosts_per_slice: int = 1
    chips_per_host: int = 4


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one tick decides over, read at one instant ``now_ms``.

    ``scale_groups`` are the TPU scale groups the provisioner may create slices from (empty when
    TPU provisioning is off). Placement ignores them; the explanations read them, so a job no
    worker can hold yet but a scale group could is "waiting for a slice", not "never".
    """

    now_ms: int
    config: SchedulerConfig
    budgets: Mapping[str, BudgetSpec]
    workers: tuple[WorkerSpec, ...]
    jobs: Mapping[str, JobSpec]
    tasks: tuple[TaskSnapshot, ...]
    scale_groups: tuple[GroupSpec, ...] = ()


# ---------------------------------------------------------------------------------------------
# The decision


@dataclass(frozen=True, slots=True)
class Assignment:
    """The decision puts ``task`` on ``worker``, running in ``band``."""

    task: str
    worker: str
    band: Band


# The decision's assignments are built by filling one of these and re-classing it, as
# :func:`task_after` does, inline in ``decision._Outcome.assign``'s loop (a call per assignment
# would cost what the filler saves; tens of thousands per large tick).
# ``tests/core/test_task_snapshot_factory.py`` holds it to the constructor.
AssignmentFiller: Any = _filler(Assignment)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The decision evicts ``victim`` (running in ``victim_band`` on ``worker``) for ``preemptor``."""

    victim: str
    preemptor: str
    worker: str
    victim_band: Band
    preemptor_band: Band


_PreemptionFiller: Any = _filler(Preemption)


def preemption(victim, preemptor, worker, victim_band, preemptor_band) -> Preemption:
    """``Preemption(...)`` faster, as :func:`task_snapshot` (a large decision builds thousands:
    6,600 on the squatters mix, where the constructor called with keywords cost 10,000
    instructions each); ``tests/core/test_task_snapshot_factory.py`` checks it against the
    constructor and the fields."""
    made = _PreemptionFiller()
    made.victim = victim
    made.preemptor = preemptor
    made.worker = worker
    made.victim_band = victim_band
    made.preemptor_band = preemptor_band
    made.__class__ = Preemption
    return made


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """``task`` is no longer scheduled (its scheduling deadline passed); ``reason`` says so."""

    task: str
    reason: str


@dataclass(frozen=True, slots=True)
class TaskAfter:
    """A task's state after the decision. Pending and finished tasks have no worker and no band."""

    state: TaskState
    worker: str | None
    band: Band | None
    preemption_count: int


_TaskAfterFiller: Any = _filler(TaskAfter)


def task_after(state, worker, band, preemption_count) -> TaskAfter:
    """``TaskAfter(...)`` faster, as :func:`task_snapshot` (a large decision builds over ten
    thousand: one per worker, band and count its assignments land on);
    ``tests/core/test_task_snapshot_factory.py`` checks it against the constructor and the
    fields."""
    after = _TaskAfterFiller()
    after.state = state
    after.worker = worker
    after.band = band
    after.preemption_count = preemption_count
    after.__class__ = TaskAfter
    return after


@dataclass(frozen=True, slots=True)
class CapacityLeft:
    """What each worker has free once a decision's placements and evictions are counted: what
    a task arriving next could use. Parallel tuples in the snapshot's worker order; ``building``
    counts ASSIGNED and BUILDING tasks (the build-slot cap). Resources in millicores, bytes,
    GPUs and TPU chips."""

    workers: tuple[str, ...] = ()
    cpu: tuple[int, ...] = ()
    mem: tuple[int, ...] = ()
    gpu: tuple[int, ...] = ()
    tpu: tuple[int, ...] = ()
    building: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one tick. See docs/snapshot-format.md for the JSON form."""

    spend: Mapping[str, int]
    effective_bands: Mapping[str, Band]
    order: tuple[str, ...]
    assignments: tuple[Assignment, ...]
    preemptions: tuple[Preemption, ...]
    unschedulable: tuple[Unschedulable, ...]
    # Reason objects from scheduler.core.explain; ``.text()`` renders them for people.
    pending_reasons: Mapping[str, object]
    after: Mapping[str, TaskAfter]
    jobs_after: Mapping[str, JobState]
    # The band each task put back in the queue this tick (a preemption victim, a gang sibling)
    # queues in next: it was not pending at tick start, so it has no effective band above.
    requeue_bands: Mapping[str, Band] = field(default_factory=dict)
    # Free capacity after this decision (what-if answers from it; not part of the JSON form).
    capacity_left: CapacityLeft = field(default_factory=CapacityLeft, compare=False)
