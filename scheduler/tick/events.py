"""The events a tick records, from the changes it writes, in its transaction.

From the kept changes (``tick.apply``): ``started`` for each assignment, ``preempted`` for each
victim, ``requeued`` for a task put back in the queue, ``task_finished`` for a task the tick
ended (killed with its job, a gang member lost for good, a scheduling deadline passed),
``finished`` for a job the tick ended. From the queue the tick leaves (the publication's
``pending_queue``): ``queued`` for a job whose band or position class
(:func:`scheduler.events.kinds.position_class`) differs from the last one recorded for it, and
``downgraded`` / ``repromoted`` when its pending tasks' effective band moves down or up (a job
first queued below its requested band is downgraded at once). From the spend and limit samples
of this tick's and the previous tick's records: ``limit_crossed`` for each user whose spend
went over or back within their limit.

What was last recorded per queued job is kept in the tick process (``QueueMemory``), replaced
only when the tick commits; a process that did not write the previous tick record (its first
tick, or another tick process ran in between) reads it back from the stream first. A tick that
reuses its decision leaves the same queue, so it records no queue events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set as AbstractSet
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import compress, repeat
from operator import ne

import orjson
from django.db import transaction
from django.db.models import Subquery

from scheduler.core.bands import Band
from scheduler.core.budget import is_over_budget
from scheduler.core.types import TERMINAL_JOB_STATES, Assignment, Decision, Preemption, TaskState
from scheduler.events import kinds
from scheduler.events.record import Draft, record_rows, staged_row
from scheduler.events.sequence import request_sequencing
from scheduler.models import Event, Job, StagedEvent, TickRecord
from scheduler.store.states import TERMINAL_JOB_VALUES
from scheduler.tick.load import LoadedSnapshot

# Per queued job: (effective band rank, position class) as last recorded.
QueueState = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class QueueMemory:
    tick_pk: int
    jobs: QueueState


_memory: QueueMemory | None = None


def forget() -> None:
    """Read the last queue events back from the stream at the next tick."""
    global _memory
    _memory = None


def _remember(memory: QueueMemory) -> None:
    global _memory
    _memory = memory


def change_event_rows(
    loaded: LoadedSnapshot,
    decision: Decision,
    kept: AbstractSet[str],
    kept_jobs: AbstractSet[str],
    assignments: Iterable[Assignment],
    preemptions: Iterable[Preemption],
    tick_pk: int,
    wall: datetime,
) -> list[tuple]:
    """The staged rows (``staged_row``'s form) of the events of the tick's kept changes: tasks
    started, preempted, requeued and ended, jobs ended. ``kept_jobs``: the jobs of the ``kept``
    tasks. Reads no database, so the tick builds them while its pipelined writes run."""
    jobs = loaded.snapshot.jobs
    kueue_jobs = loaded.kueue.jobs  # jobs routed to Kubernetes are not in the core's snapshot
    rows_of = loaded.tasks
    users: dict[str, str] = {}  # a job's tasks are many, its owner one

    def user_of(job: str) -> str:
        user = users.get(job)
        if user is None:
            spec = jobs.get(job) or kueue_jobs.get(job)
            user = users[job] = spec.user if spec is not None else ""
        return user

    # Each assignment's ``started`` event staged as a row at once (``record_rows``): a burst
    # has some 30,000, where a ``Draft`` each and its conversion cost more than the row. (A
    # burst's jobs have a task each: its owner is looked up in the snapshot's jobs directly.)
    rows: list[tuple] = []
    append = rows.append
    dumps = orjson.dumps
    assigned = set()
    started = kinds.STARTED
    for a in assignments:
        task = a.task
        cut = task.rfind("/")
        job = task[:cut]
        attempt = rows_of[task].attempt_count + 1
        assigned.add(task)
        spec = jobs.get(job)
        append(
            (
                started,
                wall,
                spec.user if spec is not None else user_of(job),
                job,
                int(task[cut + 1 :]),
                attempt,
                tick_pk,
                dumps({"worker": a.worker, "attempt": attempt, "band": _WIRE[a.band]}).decode(),
            )
        )
    drafts: list[Draft] = []
    preempted = {p.victim: p for p in preemptions}
    for task_id in sorted(kept - assigned):
        row = rows_of[task_id]
        after = decision.after[task_id]
        job, index = task_id.rsplit("/", 1)
        user, attempt = user_of(job), row.attempt_count or None
        p = preempted.get(task_id)
        if p is not None:
            drafts.append(
                Draft(
                    kinds.PREEMPTED,
                    wall,
                    user,
                    job,
                    int(index),
                    attempt,
                    tick_pk,
                    {
                        "worker": p.worker,
                        "attempt": attempt,
                        "band": _WIRE[p.victim_band],
                        "by": p.preemptor,
                        "by_user": user_of(p.preemptor.rsplit("/", 1)[0]),
                        "by_band": _WIRE[p.preemptor_band],
                    },
                )
            )
        if after.state is TaskState.PENDING:
            if row.state != TaskState.PENDING.value:
                reason = f"preempted by {p.preemptor}" if p is not None else "a gang member was preempted"
                drafts.append(
                    Draft(
                        kinds.REQUEUED,
                        wall,
                        user,
                        job,
                        int(index),
                        attempt,
                        tick_pk,
                        {"attempt": attempt, "reason": reason},
                    )
                )
        elif after.state.value in _TASK_ENDS:
            drafts.append(
                Draft(
                    kinds.TASK_FINISHED,
                    wall,
                    user,
                    job,
                    int(index),
                    attempt,
                    tick_pk,
                    {
                        "attempt": attempt,
                        "outcome": after.state.value,
                        "exit_code": None,
                        "reason": _end_reason(after.state, p),
                    },
                )
            )
    # The jobs the tick ended: a burst changes some 20,000 jobs' states, few of them to an end
    # (members compared by identity in C, where ``.value`` runs Python per job).
    ended = sorted((job, state) for job, state in decision.jobs_after.items() if state in _JOB_ENDS)
    if ended:
        for job, state in ended:
            if job in kept_jobs and job in loaded.job_pks and loaded.job_states.get(job) not in TERMINAL_JOB_VALUES:
                drafts.append(
                    Draft(kinds.FINISHED, wall, user_of(job), job, tick=tick_pk, data={"outcome": state.value})
                )
    rows.extend(map(staged_row, drafts))
    return rows


@dataclass(frozen=True)
class Prior:
    """What this tick's limit and queue events are told apart from: the previous tick record's
    spend and limits, and what was last recorded per queued job (this process's copy)."""

    spend_limits: tuple[dict, dict]
    queue: QueueState


def read_prior(tick_pk: int) -> Prior:
    """The :class:`Prior` of tick ``tick_pk`` (reads the database: before the tick's pipelined
    writes, so the rows built while they run read nothing)."""
    previous = TickRecord.objects.filter(pk__lt=tick_pk).order_by("-pk").values_list("pk", "spend", "limits").first()
    return Prior(previous[1:] if previous else ({}, {}), _queue_memory(previous[0] if previous else None))


def state_event_rows(
    prior: Prior,
    jobs: Mapping,
    tick: TickRecord,
    queue_jobs: Mapping[Band, list[str]] | None,
    wall: datetime,
    job_counts: Mapping[int, Mapping[str, int]] | None = None,
) -> list[tuple]:
    """The staged rows of the budget limits crossed and the queue's moves at this tick, told
    apart from ``prior`` (``jobs``: the snapshot's). ``queue_jobs`` is the publication's
    ``queued_jobs(pending_queue(decision))`` (per band, the job of each queued task in queue
    order), or ``None`` when the decision was reused; ``job_counts`` its ``queued_job_counts``
    when the caller has them (each band's jobs in order, without a pass over its tasks). Reads
    no database; what was recorded per queued job is kept for the next tick once this one
    commits."""
    drafts = _limit_events(tick, prior.spend_limits, wall)
    memory = prior.queue
    if queue_jobs is not None:
        drafts.extend(_queue_events(queue_jobs, memory, jobs, tick.pk, wall, job_counts))
    transaction.on_commit(partial(_remember, QueueMemory(tick.pk, memory)))
    # Readable at once, not at the next reader's poll; moved by Celery, off the tick's path.
    transaction.on_commit(request_sequencing)
    return list(map(staged_row, drafts))


def record_tick_events(rows: list[tuple]) -> int:
    """Stage this tick's events, in one statement, inside the tick's transaction: ``rows`` are
    :func:`change_event_rows`' and :func:`state_event_rows`'."""
    return record_rows(rows)


# ``Band.wire`` without the enum's name lookup, for the tens of thousands of events of a burst.
_WIRE = {band: band.wire for band in Band}

# A job's finished states, as a tuple: ``in`` compares members by identity in C.
_JOB_ENDS = tuple(TERMINAL_JOB_STATES)

# Task states the tick ends a task in (terminal, and not a success: the tick never succeeds one).
_TASK_ENDS = frozenset(
    s.value for s in (TaskState.KILLED, TaskState.COSCHED_FAILED, TaskState.PREEMPTED, TaskState.UNSCHEDULABLE)
)


def _end_reason(state: TaskState, preemption: Preemption | None) -> str:
    if state is TaskState.PREEMPTED and preemption is not None:
        return f"preempted by {preemption.preemptor}, no preemption retries left"
    return {
        TaskState.KILLED: "killed: its job ended",
        TaskState.COSCHED_FAILED: "a gang member was preempted for good",
        TaskState.UNSCHEDULABLE: "not scheduled before its scheduling deadline",
    }.get(state, state.value)


def _limit_events(tick: TickRecord, previous: tuple[dict, dict], wall: datetime) -> list[Draft]:
    """``limit_crossed`` for each user over their limit now and not at the previous tick, or
    the other way round (by the two records' spend and limit samples)."""
    before_spend, before_limits = previous
    drafts = []
    for user in sorted(set(tick.spend) | set(tick.limits) | set(before_spend)):
        now_over = is_over_budget(tick.spend.get(user, 0), tick.limits.get(user, 0))
        was_over = is_over_budget(before_spend.get(user, 0), before_limits.get(user, 0))
        if now_over != was_over:
            drafts.append(
                Draft(
                    kinds.LIMIT_CROSSED,
                    wall,
                    user,
                    tick=tick.pk,
                    data={"over": now_over, "spend": tick.spend.get(user, 0), "limit": tick.limits.get(user, 0)},
                )
            )
    return drafts


def _queue_memory(previous: int | None) -> QueueState:
    """A copy of what was last recorded per queued job, read back from the stream unless this
    process wrote the previous tick record (``previous``)."""
    if _memory is not None and _memory.tick_pk == previous:
        return _memory.jobs.copy()  # as one block (see ``ClusterRows._own``)
    return read_queue_state()


def read_queue_state() -> QueueState:
    """Per live job, its last ``queued`` event's band and class, unless a ``requeued`` event
    came after it, from the stream and the staged rows. (A job leaves the queue when its tasks
    start and comes back only through a requeue: tasks are created pending at submission only.
    A job that left and came back is therefore queued again after a restart, as it would be
    without one.) One read per process start: the live jobs' queue and requeue events within
    retention."""
    live = Subquery(Job.objects.filter(finished_state__isnull=True).values("name"))
    relevant = (kinds.QUEUED, kinds.REQUEUED)
    state: QueueState = {}
    for model in (Event, StagedEvent):
        for job, kind, data in (
            model.objects.filter(kind__in=relevant, job__in=live).order_by("id").values_list("job", "kind", "data")
        ):
            if kind == kinds.QUEUED:
                data = orjson.loads(data) if isinstance(data, str) else data  # staged: JSON text
                state[job] = (Band.parse(data["band"]).value, data["position_class"])
            else:
                state.pop(job, None)
    return state


def _queue_events(
    queue_jobs: Mapping[Band, list[str]],
    memory: QueueState,
    jobs: Mapping,
    tick_pk: int,
    wall: datetime,
    job_counts: Mapping[int, Mapping[str, int]] | None = None,
) -> list[Draft]:
    """Queue events for the jobs whose band or class changed; ``memory`` becomes this tick's.
    ``queue_jobs``: per band, in band order, the job of each queued task in queue order;
    ``job_counts``, if given, its ``queued_job_counts`` (whose keys are each band's jobs in the
    order of their first task).

    A job is in its best band's queue only (bands in order: the first that holds it), at its
    first position there. Each band's jobs, in position order, fall into runs of one position
    class (positions 1, 2-10, 11-100, ...); a run's jobs are compared with what was last
    recorded in C (a look-up and a comparison each), and only those that differ get Python work: a tick
    costs in proportion to the jobs whose band or class moved, not to the queue."""
    drafts: list[Draft] = []
    queued: set[str] = set()  # the jobs of the bands done so far
    for band, band_jobs in queue_jobs.items():
        length, rank = len(band_jobs), band.value
        # Each job once, in the order of its first task, and that task's position: in C (a dict
        # built from the reversed column keeps each job's smallest position).
        first_position = dict(zip(reversed(band_jobs), range(length, 0, -1)))
        names = list(dict.fromkeys(band_jobs) if job_counts is None else job_counts[rank])
        positions = list(map(first_position.__getitem__, names))
        start, cls = 0, 0
        while start < len(names):
            # The run of class ``cls`` (``kinds.position_class``).
            end = bisect_right(positions, kinds.last_position_of_class(cls), start)
            recorded = (rank, cls)
            differ = compress(range(start, end), map(ne, map(memory.get, names[start:end]), repeat(recorded)))
            for i in differ:
                job = names[i]
                if job in queued:
                    continue  # in a better band's queue
                before = memory.get(job)
                spec = jobs.get(job)
                user = spec.user if spec is not None else ""
                from_band = Band(before[0]) if before is not None else (spec.band if spec is not None else band)
                if from_band != band:
                    kind = kinds.DOWNGRADED if band > from_band else kinds.REPROMOTED
                    drafts.append(
                        Draft(
                            kind,
                            wall,
                            user,
                            job,
                            tick=tick_pk,
                            data={"from_band": _WIRE[from_band], "to_band": _WIRE[band]},
                        )
                    )
                drafts.append(
                    Draft(
                        kinds.QUEUED,
                        wall,
                        user,
                        job,
                        tick=tick_pk,
                        data={"band": _WIRE[band], "position": positions[i], "of": length, "position_class": cls},
                    )
                )
                memory[job] = recorded
            start, cls = end, cls + 1
        queued.update(names)
    for job in memory.keys() - queued:
        del memory[job]  # left the queue: queued again when it comes back
    return drafts
