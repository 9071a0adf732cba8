"""Start-time estimates: when will each pending task probably start, and how sure is that?

The method (documented in docs/estimates.md) runs the scheduler's own :func:`decide` forward
over simulated ticks on a copy of a snapshot. Running tasks end at times predicted from the
history of finished runs (the same job, else the same user and shape, else the band); a task
placed in the simulation runs for its own predicted duration. The first simulated tick that
places a pending task is its estimated start. Two runs bracket it: one with median durations
(p50), one with 90th-percentile durations (p90, pessimistic).

A task the simulation cannot place (capacity held by work whose end nothing predicts, or past
the simulated horizon) falls back to the observed waits of its band, conditioned on how long it
has already waited. Where neither has enough samples the estimate is ``None`` with a reason:
never a made-up number. A task no healthy worker (or scale group) could hold even idle gets no
estimate either, whatever its band's waits: nothing but a change of its request or of the
cluster starts it.

Pure: no Django, no clock. ``snapshot.now_ms`` is the present; the caller passes the history
and, if it wants a time budget, a ``out_of_time`` callable it owns.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.feasibility import analyse_job, any_fits_when_idle
from scheduler.core.constraints import constraint_matches, hard_constraints, request_tuple, worker_attributes
from scheduler.core.types import (
    ACTIVE_STATES,
    ClusterSnapshot,
    JobSpec,
    Resources,
    TaskSnapshot,
    TaskState,
)

# Fewest finished runs (or observed waits) a prediction may rest on: below this a median or a
# 90th percentile is noise, and the estimate says so instead.
MIN_SAMPLES = 3

METHOD_SIMULATION = "simulation"
METHOD_WAIT_HISTORY = "wait_history"

ShapeKey = tuple[int, int, str, str, int]


def shape_key(resources: Resources) -> ShapeKey:
    """What a task asks for, as a hashable key (CPU, memory, device type, variant, count)."""
    device = resources.device
    return (resources.cpu_millicores, resources.memory_bytes, device.type.value, device.variant or "", device.count)


def quantile(values: Sequence[int], q: float) -> int:
    """The nearest-rank ``q`` quantile of sorted ``values`` (which must not be empty)."""
    rank = max(1, -(-int(q * 1000) * len(values) // 1000))  # ceil(q * n), exact in integers
    return values[min(rank, len(values)) - 1]


@dataclass(frozen=True, slots=True)
class RunHistory:
    """Finished runs' durations (ms) by key, and observed waits (ms, submission to first start)
    by band. Each sequence is sorted ascending (``RunHistory.build`` sorts them)."""

    by_job: Mapping[str, Sequence[int]] = field(default_factory=dict)
    by_user_shape: Mapping[tuple[str, ShapeKey], Sequence[int]] = field(default_factory=dict)
    by_band: Mapping[Band, Sequence[int]] = field(default_factory=dict)
    waits_by_band: Mapping[Band, Sequence[int]] = field(default_factory=dict)

    @staticmethod
    def build(
        runs: Sequence[tuple[str, str, ShapeKey, Band, int]], waits: Sequence[tuple[Band, int]] = ()
    ) -> RunHistory:
        """From ``(job id, user, shape, band, duration ms)`` runs and ``(band, wait ms)`` waits."""
        by_job: dict[str, list[int]] = {}
        by_user_shape: dict[tuple[str, ShapeKey], list[int]] = {}
        by_band: dict[Band, list[int]] = {}
        for job_id, user, shape, band, duration in runs:
            by_job.setdefault(job_id, []).append(duration)
            by_user_shape.setdefault((user, shape), []).append(duration)
            by_band.setdefault(band, []).append(duration)
        waits_by_band: dict[Band, list[int]] = {}
        for band, wait in waits:
            waits_by_band.setdefault(band, []).append(wait)
        for table in (by_job, by_user_shape, by_band, waits_by_band):
            for values in table.values():
                values.sort()
        return RunHistory(by_job, by_user_shape, by_band, waits_by_band)

    def levels(self, job: JobSpec) -> list[Sequence[int]]:
        """The histories with enough samples for ``job``'s runs, most specific first: the same
        job, the same user and shape, the band."""
        found = []
        for values in (
            self.by_job.get(job.id),
            self.by_user_shape.get((job.user, shape_key(job.resources))),
            self.by_band.get(job.band),
        ):
            if values is not None and len(values) >= MIN_SAMPLES:
                found.append(values)
        return found

    def durations(self, job: JobSpec) -> Sequence[int] | None:
        """The most specific history with enough samples for ``job``'s runs, or None."""
        levels = self.levels(job)
        return levels[0] if levels else None


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """A pending task's estimated start (ms since the epoch), or why there is none.

    ``p50_ms``/``p90_ms`` are both set or both None; with None, ``reason`` says why.
    ``as_of_ms`` is the snapshot's time.
    """

    as_of_ms: int
    p50_ms: int | None = None
    p90_ms: int | None = None
    method: str = ""
    reason: str = ""


# The first simulated minute goes tick by tick, as the scheduler will run it; after that the
# simulation steps a minute at a time with the per-tick caps scaled to match, so an hour ahead
# costs sixty decisions, not seven hundred (starts beyond the first minute are to the minute).
FINE_STEPS_MS = 60_000
COARSE_STEP_MS = 60_000


# The pessimistic run assumes this many times the recent rate of submissions (each recent job
# once, and every second one again half a window later): a busier hour than the last one.
PESSIMISTIC_ARRIVALS = 1.5


def _replayed(arrivals: Sequence[tuple[int, JobSpec]], rate: float) -> list[tuple[int, JobSpec]]:
    """The future jobs of one run, in time order, each with an id of its own."""
    out = [(at, replace(job, id=f"{job.id}~1")) for at, job in arrivals]
    if rate > 1 and len(arrivals) > 1:
        span = max(at for at, _ in arrivals) - min(at for at, _ in arrivals)
        out += [(at + span // 2, replace(job, id=f"{job.id}~2")) for at, job in arrivals[::2]]
    out.sort(key=lambda pair: pair[0])
    return out


def estimate_starts(
    snapshot: ClusterSnapshot,
    history: RunHistory,
    running_since: Mapping[str, int],
    *,
    tick_ms: int,
    max_steps: int = 200,
    coarse_step_ms: int = COARSE_STEP_MS,
    arrivals: Sequence[tuple[int, JobSpec]] = (),
    out_of_time: Callable[[], bool] = lambda: False,
) -> dict[str, StartEstimate]:
    """An estimate for every task PENDING in ``snapshot``.

    ``running_since`` maps active task ids to when their current attempt started (ms; a task
    missing from it is taken to have just started). The simulation steps by ``tick_ms`` (the
    tick interval) for the first minute, then by ``coarse_step_ms``; the two runs (p50 and p90
    durations) advance in lockstep, at most ``max_steps`` steps each, until both are done or
    ``out_of_time()`` is true (the tasks not yet placed then fall back to observed waits).

    ``arrivals`` is the work assumed to be submitted in the future, ``(at ms, job)`` (the shell
    replays the last hour's submissions an hour later): work of a higher band, or of a user
    with less spend, that arrives while a task waits goes ahead of it, as it will in reality.
    The p90 run replays it at ``PESSIMISTIC_ARRIVALS`` times the rate.
    """
    targets = [t for t in snapshot.tasks if t.state is TaskState.PENDING]
    if not targets:
        return {}
    runs = [
        _Future(snapshot, history, running_since, 0.5, tick_ms, coarse_step_ms, _replayed(arrivals, 1)),
        _Future(
            snapshot, history, running_since, 0.9, tick_ms, coarse_step_ms, _replayed(arrivals, PESSIMISTIC_ARRIVALS)
        ),
    ]
    for _ in range(max_steps):
        live = [run for run in runs if not run.done]
        if not live or out_of_time():
            break
        for run in live:
            if out_of_time():
                break
            run.step()
    optimistic, pessimistic = runs
    now = snapshot.now_ms
    never = NeverFits(snapshot)
    estimates: dict[str, StartEstimate] = {}
    for task in targets:
        a = optimistic.starts.get(task.id)
        b = pessimistic.starts.get(task.id)
        if a is not None and b is not None:
            estimates[task.id] = StartEstimate(now, min(a, b), max(a, b), METHOD_SIMULATION)
            continue
        job = snapshot.jobs[task.job_id]
        if never(job):
            estimates[task.id] = StartEstimate(now, reason=NEVER_REASON)
            continue
        fallback = _from_waits(job, history, now)
        if fallback is not None:
            # Each run that did not place it says it starts after the time that run reached.
            low = max(fallback.p50_ms, a if a is not None else optimistic.t)
            high = max(fallback.p90_ms, b if b is not None else pessimistic.t, low)
            estimates[task.id] = replace(fallback, p50_ms=low, p90_ms=high)
        else:
            estimates[task.id] = StartEstimate(now, reason=_why_not(optimistic if a is None else pessimistic))
    return estimates


NEVER_REASON = "never: no healthy worker meets every requirement, even idle, on the cluster as it is"


class NeverFits:
    """Whether a job can never run on a snapshot's healthy workers, even idle, nor on a slice a
    scale group could create (``feasibility.analyse_job``'s verdict, the one its explanation
    gives). Asked once per distinct request: jobs asking the same share the answer."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.workers, self.groups = snapshot.workers, snapshot.scale_groups
        self.attributes: list | None = None
        self.verdicts: dict[tuple, bool] = {}

    def __call__(self, job: JobSpec) -> bool:
        key = (job.resources, job.constraints, job.group_by, job.replicas if job.group_by else 1)
        verdict = self.verdicts.get(key)
        if verdict is None:
            if self.attributes is None:
                self.attributes = [
                    worker_attributes(w.attributes, w.device.type, w.device.variant) for w in self.workers
                ]
            # Most requests fit some worker, found in a short scan; the full analysis (every
            # requirement over every worker) only for gangs and for requests that fit none.
            fits = job.group_by is None and self.one_fits(job)
            verdict = self.verdicts[key] = (
                not fits and analyse_job(job, self.workers, self.groups, self.attributes).never
            )
        return verdict

    def one_fits(self, job: JobSpec) -> bool:
        """Whether some healthy worker meets every hard constraint and could hold one task idle."""
        hard = hard_constraints(job)
        request = request_tuple(job.resources)
        for index, (worker, attrs) in enumerate(zip(self.workers, self.attributes)):
            if (
                worker.healthy
                and any_fits_when_idle(self.workers, (index,), request)
                and all(constraint_matches(attrs, c) for c in hard)
            ):
                return True
        return False


def _why_not(run: _Future) -> str:
    if run.stopped_early:
        return "not enough history: it starts beyond the simulated horizon and its band has too few observed waits"
    if run.blocked_by_unknown:
        return "not enough history: the work ahead of it has no run-time history to predict when it ends"
    return (
        "not placed in the simulated future (no worker frees up that fits it) and its band has too few observed waits"
    )


def _from_waits(job: JobSpec, history: RunHistory, now: int) -> StartEstimate | None:
    """Observed waits of the job's band longer than it has already waited, if enough."""
    span = conditioned_on_wait(history.waits_by_band.get(job.band, ()), job.submitted_at_ms, now)
    if span is None:
        return None
    return StartEstimate(now, span[0], span[1], METHOD_WAIT_HISTORY)


def conditioned_on_wait(
    waits: Sequence[int], submitted_ms: int, now_ms: int, earliest_ms: int | None = None
) -> tuple[int, int] | None:
    """(p50, p90) start of work submitted at ``submitted_ms`` that has not started by ``now_ms``,
    from the observed waits of its band (ms, ascending): the median and 90th percentile of the
    waits longer than it has waited so far, each no earlier than ``earliest_ms``. None with
    fewer than ``MIN_SAMPLES`` such waits (it has waited longer than nearly all of them)."""
    waited = now_ms - submitted_ms
    longer = [w for w in waits if w > waited]
    if len(longer) < MIN_SAMPLES:
        return None
    floor = now_ms if earliest_ms is None else earliest_ms
    p50 = max(submitted_ms + quantile(longer, 0.5), floor)
    return p50, max(submitted_ms + quantile(longer, 0.9), p50)


def _predicted_end(job: JobSpec, history: RunHistory, started_ms: int, now: int, q: float) -> int | None:
    """When an active task started at ``started_ms`` ends: quantile ``q`` of the runs that
    lasted longer than it has run so far, from the most specific history that has
    ``MIN_SAMPLES`` of them (a run past all of its own kind's is judged by a coarser kind's);
    None if no history has."""
    elapsed = now - started_ms
    for values in history.levels(job):
        longer = [v for v in values if v > elapsed]
        if len(longer) >= MIN_SAMPLES:
            return started_ms + quantile(longer, q)
    return None


class _Future:
    """One simulated future of the cluster, advanced one scheduling step at a time."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        history: RunHistory,
        running_since: Mapping[str, int],
        q: float,
        tick_ms: int,
        coarse_step_ms: int,
        arrivals: list[tuple[int, JobSpec]] = (),
    ) -> None:
        self.snapshot = snapshot
        self.jobs = dict(snapshot.jobs)
        self.arrivals = list(arrivals)
        self.next_arrival = 0
        self.history = history
        self.q = q
        self.tick_ms = tick_ms
        factor = max(1, coarse_step_ms // tick_ms)
        config = snapshot.config
        self.coarse_ms = factor * tick_ms
        # A coarse step stands for ``factor`` ticks: as many placements per worker and per job.
        self.coarse_config = replace(
            config,
            max_tasks_per_job_per_cycle=config.max_tasks_per_job_per_cycle * factor,
            max_assignments_per_worker=config.max_assignments_per_worker * factor,
        )
        self.durations: dict[str, int | None] = {}
        now = snapshot.now_ms
        self.t = now
        self.tasks: dict[str, TaskSnapshot] = {}
        self.ends: dict[str, int | None] = {}
        self.heap: list[tuple[int, str]] = []
        self.targets: set[str] = set()
        self.starts: dict[str, int] = {}
        self.done = False
        self.stopped_early = True
        self.steps = 0
        jobs = snapshot.jobs
        for task in snapshot.tasks:
            if task.state is TaskState.PENDING:
                self.targets.add(task.id)
            elif task.state in ACTIVE_STATES:
                end = _predicted_end(jobs[task.job_id], history, running_since.get(task.id, now), now, q)
                self.ends[task.id] = end
                if end is not None:
                    self.heap.append((end, task.id))
            elif task.unfinished_attempt_worker is None:
                continue
            self.tasks[task.id] = task
        heapq.heapify(self.heap)

    def duration(self, job_id: str) -> int | None:
        if job_id not in self.durations:
            values = self.history.durations(self.jobs[job_id])
            self.durations[job_id] = None if values is None else quantile(values, self.q)
        return self.durations[job_id]

    def step(self) -> None:
        """Decide one step at ``self.t``, apply it, and move the clock to the next step."""
        tasks, ends, heap, t = self.tasks, self.ends, self.heap, self.t
        while heap and heap[0][0] <= t:
            end, task_id = heapq.heappop(heap)
            if ends.get(task_id) == end:
                del ends[task_id]
                del tasks[task_id]
        arrivals = self.arrivals
        while self.next_arrival < len(arrivals) and arrivals[self.next_arrival][0] <= t:
            _, job = arrivals[self.next_arrival]
            self.next_arrival += 1
            self.jobs[job.id] = replace(job, submitted_at_ms=t, root_submitted_at_ms=t)
            for i in range(job.replicas):
                tasks[f"{job.id}/{i}"] = TaskSnapshot(f"{job.id}/{i}", job.id, i)
        fine = t - self.snapshot.now_ms < FINE_STEPS_MS
        config = self.snapshot.config if fine else self.coarse_config
        decision = decide(replace(self.snapshot, now_ms=t, config=config, jobs=self.jobs, tasks=tuple(tasks.values())))
        if self.steps == 0:
            # Earlier attempts still holding capacity are confirmed finished within a tick.
            for task_id, task in list(tasks.items()):
                if task.unfinished_attempt_worker is not None:
                    if task.state in ACTIVE_STATES or task.state is TaskState.PENDING:
                        tasks[task_id] = replace(task, unfinished_attempt_worker=None)
                    else:
                        del tasks[task_id]
        self.steps += 1
        assigned = set()
        running = TaskState.RUNNING
        for a in decision.assignments:
            assigned.add(a.task)
            old = tasks[a.task]
            tasks[a.task] = TaskSnapshot(a.task, old.job_id, old.index, running, a.worker, a.band, old.preemption_count)
            if a.task in self.targets and a.task not in self.starts:
                self.starts[a.task] = t
            d = self.duration(old.job_id)
            end = None if d is None else t + max(d, 1)
            ends[a.task] = end
            if end is not None:
                heapq.heappush(heap, (end, a.task))
        requeued, ended = apply_unassigned(tasks, decision, assigned)
        for task_id in requeued + ended:
            ends.pop(task_id, None)
        self.targets.difference_update(ended)
        if len(self.starts) >= len(self.targets) and all(task_id in self.starts for task_id in self.targets):
            self._finish()
            return
        step = self.tick_ms if fine else self.coarse_ms
        if decision.assignments or decision.preemptions:
            self.t = t + step
            return
        # Nothing moved: skip the idle steps to the one at or after the next predicted end.
        while heap and ends.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        events = [heap[0][0]] if heap else []
        if self.next_arrival < len(arrivals):
            events.append(arrivals[self.next_arrival][0])
        if not events:
            self._finish()
            return
        self.t = t + max(1, -(-(min(events) - t) // step)) * step

    def _finish(self) -> None:
        self.done = True
        self.stopped_early = False

    @property
    def blocked_by_unknown(self) -> bool:
        """Some work in the simulated cluster holds capacity with no predicted end."""
        return any(end is None for end in self.ends.values())


def apply_unassigned(tasks: dict[str, TaskSnapshot], decision, assigned: set[str]) -> tuple[list[str], list[str]]:
    """Carry a decision's other outcomes into simulated ``tasks`` (task id -> snapshot): a task
    it sent back to pending (preempted, retried) is pending again with its new preemption count;
    a task it ended is dropped. Returns ``(requeued, ended)`` ids, for the caller's own books."""
    requeued: list[str] = []
    ended: list[str] = []
    for task_id, after in decision.after.items():
        if task_id in assigned:
            continue
        if after.state is TaskState.PENDING:
            old = tasks[task_id]
            tasks[task_id] = TaskSnapshot(
                task_id, old.job_id, old.index, TaskState.PENDING, None, None, after.preemption_count
            )
            requeued.append(task_id)
        elif after.state not in ACTIVE_STATES:
            tasks.pop(task_id, None)
            ended.append(task_id)
    return requeued, ended
