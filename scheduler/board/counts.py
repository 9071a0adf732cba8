"""What the console's scheduler and budgets pages count over every live task, computed once per
tick and published on the board.

The tick holds every live task (its snapshot) and what it wrote (the decision's changes it
kept), so it counts the active tasks once, here, and stores the counts beside the queue
explanation; the page reads them with the queue it already parsed instead of grouping the task
table on every request (43,000 active tasks cost the scheduler page ~130 ms of SQL,
and the budgets pages' per-user counts of 143,000 live tasks ~60-450 ms). The counts
depend only on the snapshot, the decision and which changes were kept, so a tick that reuses
the previous decision records the same figures it would have computed afresh.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from itertools import chain
from typing import NamedTuple

from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.core.kueue import KueueInput
from scheduler.core.types import ACTIVE_STATES, ClusterSnapshot, Decision, JobSpec, TaskAfter, TaskSnapshot, TaskState

PENDING, ASSIGNED, BUILDING, RUNNING = TaskState.PENDING, TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING


class UserCounts(NamedTuple):
    """A user's unfinished work: pending and active (assigned/building/running) tasks, and the
    jobs that have either."""

    pending: int = 0
    active: int = 0
    jobs: int = 0


NO_WORK = UserCounts()


def active_counts(
    snapshot: ClusterSnapshot,
    decision: Decision,
    kept: Collection[str],
    kueue: KueueInput | None = None,
    per_worker: dict[str, dict[tuple[str, int, str, str, bool], int]] | None = None,
) -> dict:
    """``{"by_band_user": {rank: {user: n}}, "by_state": {state: n}, "by_user": {user:
    [pending, active, jobs]}}`` after this tick's writes: a task's kept change wins over its
    snapshot state; a change the tick dropped (the task moved meanwhile) is not counted.

    ``by_band_user`` and ``by_state`` count the active tasks (ASSIGNED/BUILDING/RUNNING); running
    tasks carry the band stamped when they were placed; users come from the job. ``by_user``
    counts each user's pending and active tasks and the jobs that have any (the budgets pages'
    columns). The Kubernetes-routed pending tasks (``kueue.pending``, outside the core's
    snapshot) count as pending, and as active once this tick promoted them.

    ``per_worker``, when given, is filled with who holds each worker: ``{worker: {(user,
    stamped band rank, device type, device variant, gang): active tasks}}`` (the what-if basis
    stores it, so a what-if names the holders of its matching workers, and whether it may evict
    them, without grouping the task table).

    One pass counts the tasks per job (100,000 pending tasks fall into a few groups per job);
    the per-user sums run over those groups."""
    after = decision.after
    jobs = snapshot.jobs
    kube_jobs = kueue.jobs if kueue is not None else {}
    pending_of_job: dict[str, int] = {}
    # {(job, stamped band or None, state, worker): n} of active tasks; states compared by
    # identity (hashing an Enum member runs Python code: too slow for 100,000 tasks).
    active_of_job: dict[tuple[str, int | None, str, str | None], int] = {}
    for task in chain(snapshot.tasks, kueue.pending if kueue is not None else ()):
        if task.id in kept:
            moved = after[task.id]
            state, band, worker = moved.state, moved.band, moved.worker
        else:
            state, band, worker = task.state, task.band, task.worker
        if state is PENDING:
            pending_of_job[task.job_id] = pending_of_job.get(task.job_id, 0) + 1
        elif state is RUNNING or state is ASSIGNED or state is BUILDING:
            key = (task.job_id, None if band is None else int(band), state.value, worker)
            active_of_job[key] = active_of_job.get(key, 0) + 1
    users_by_band: dict[int, dict[str, int]] = {}
    by_state: dict[str, int] = {}
    by_user: dict[str, list[int]] = {}
    user_of_job: dict[str, str] = {}
    # Per user: [pending, active, jobs with either]; each job's user looked up once.
    for job_id in dict.fromkeys(chain(pending_of_job, (key[0] for key in active_of_job))):
        user = user_of_job[job_id] = (jobs.get(job_id) or kube_jobs[job_id]).user
        counts = by_user.get(user)
        if counts is None:
            counts = by_user[user] = [0, 0, 0]
        counts[0] += pending_of_job.get(job_id, 0)
        counts[2] += 1
    for (job_id, band, state, worker), n in active_of_job.items():
        user = user_of_job[job_id]
        by_user[user][1] += n
        by_state[state] = by_state.get(state, 0) + n
        if band is None:
            continue
        users = users_by_band.get(band)
        if users is None:
            users = users_by_band[band] = {}
        users[user] = users.get(user, 0) + n
        if per_worker is not None and worker is not None:
            held = per_worker.get(worker)
            if held is None:
                held = per_worker[worker] = {}
            job = jobs.get(job_id) or kube_jobs[job_id]
            device = job.resources.device
            key = (user, band, device.type.value, device.variant or "", job.group_by is not None)
            held[key] = held.get(key, 0) + n
    by_band_user = {str(band): users for band, users in users_by_band.items()}
    return {"by_band_user": by_band_user, "by_state": by_state, "by_user": by_user}


# A task's part in the counts: (job, user, stamped band rank or None, state value, worker or
# None, the holder's kind of work: device type, variant, gang, the task's resource value) while
# it is pending or active; None otherwise. Pending tasks count no band, worker, kind or value.
TaskKey = tuple[str, str, int | None, str, str | None, tuple[str, str, bool] | None, int]


def task_key(job: JobSpec, state: TaskState, band: Band | None, worker: str | None) -> TaskKey | None:
    """A task of ``job``'s part in the counts, from its state, stamped band and worker."""
    if state is PENDING:
        return (job.id, job.user, None, PENDING_VALUE, None, None, 0)
    if state is RUNNING or state is ASSIGNED or state is BUILDING:
        device = job.resources.device
        kind = (device.type.value, device.variant or "", job.group_by is not None)
        value = resource_value(job.resources)
        return (job.id, job.user, None if band is None else int(band), state.value, worker, kind, value)
    return None


def snapshot_key(task: TaskSnapshot, job: JobSpec) -> TaskKey | None:
    return task_key(job, task.state, task.band, task.worker)


def after_key(job: JobSpec, after: TaskAfter) -> TaskKey | None:
    return task_key(job, after.state, after.band, after.worker)


PENDING_VALUE = PENDING.value
RUNNING_VALUE, ASSIGNED_VALUE, BUILDING_VALUE = RUNNING.value, ASSIGNED.value, BUILDING.value


def task_keys(
    jobs: Callable[[str], JobSpec], job_ids: Iterable[str], states: Iterable[TaskSnapshot | TaskAfter | None]
) -> list[TaskKey | None]:
    """``task_key`` of each task of ``job_ids`` in the state, band and worker of its ``states``
    entry (a snapshot or a change; None: the task is gone), in one loop: each job's shared parts
    are built once and states are compared by identity (a burst keys some 100,000 tasks, where
    two calls each cost more than the rest). ``jobs`` finds a job by its id."""
    keys: list[TaskKey | None] = []
    append = keys.append
    pending_key: dict[str, TaskKey] = {}
    heads: dict[str, tuple[str, tuple[str, str, bool], int]] = {}  # job id -> (user, kind, value)
    # Values once per request object (the tick's job rows share one per shape: a burst's
    # 30,000 new jobs have a handful): id -> value, the jobs kept alive by ``jobs``.
    value_of_request: dict[int, int] = {}
    for job_id, now in zip(job_ids, states):
        if now is None:
            append(None)
            continue
        state = now.state
        if state is PENDING:
            key = pending_key.get(job_id)
            if key is None:
                key = pending_key[job_id] = (job_id, jobs(job_id).user, None, PENDING_VALUE, None, None, 0)
            append(key)
            continue
        if state is RUNNING:
            value = RUNNING_VALUE
        elif state is ASSIGNED:
            value = ASSIGNED_VALUE
        elif state is BUILDING:
            value = BUILDING_VALUE
        else:
            append(None)
            continue
        head = heads.get(job_id)
        if head is None:
            job = jobs(job_id)
            resources = job.resources
            device = resources.device
            worth = value_of_request.get(id(resources))
            if worth is None:
                worth = value_of_request[id(resources)] = resource_value(resources)
            head = heads[job_id] = (
                job.user,
                (device.type.value, device.variant or "", job.group_by is not None),
                worth,
            )
        band = now.band
        append((job_id, head[0], None if band is None else int(band), value, now.worker, head[1], head[2]))
    return keys


class LiveCounts:
    """The counts :func:`active_counts` computes, kept between ticks and updated task by task:
    setting one task's part (:meth:`set`) costs the same whatever the cluster's size, so a
    tick pays for what changed (see ``scheduler.board.publish``). :meth:`published` is equal to
    ``active_counts`` over the same tasks (a property test holds it so)."""

    def __init__(self) -> None:
        self.of_task: dict[str, TaskKey] = {}
        self.by_band_user: dict[int, dict[str, int]] = {}
        self.by_state: dict[str, int] = {}
        self.by_user: dict[str, list[int]] = {}  # [pending, active, jobs with either]
        self.live_of_job: dict[str, int] = {}  # pending + active tasks
        self.per_worker: dict[str, dict[tuple[str, int, str, str, bool], int]] = {}
        # The resource value of the active tasks with a stamped band, per band rank and user
        # (beside ``by_band_user``, which counts them): what the fairness sample's running
        # values start from (``core.fairness.left_running``).
        self.worth_by_band_user: dict[int, dict[str, int]] = {}
        # What ``published`` last gave for each worker's holders (copies, never changed once
        # given), and the workers whose holders changed since: a tick re-copies those only, and
        # hands the same objects out again for the rest (``board.formats.holder_columns`` then
        # tells them unchanged by identity, not by comparing every holder).
        self._held_copies: dict[str, dict[tuple[str, int, str, str, bool], int]] = {}
        self._touched: set[str] = set()

    @classmethod
    def of(cls, tasks: Iterable[tuple[str, TaskKey | None]]) -> LiveCounts:
        """The counts of ``(task id, part)`` pairs (each task once): the parts grouped first, so
        the tables are added to once per distinct part, not once per task."""
        counts = cls()
        counts.of_task = {task_id: key for task_id, key in tasks if key is not None}
        counts._add_all(Counter(counts.of_task.values()))
        return counts

    @classmethod
    def of_tasks(
        cls,
        tasks: Collection[TaskSnapshot],
        jobs: Callable[[str], JobSpec],
        after: Mapping[str, TaskAfter],
        kept: Collection[str],
    ) -> LiveCounts:
        """``of`` every task in ``tasks``, each as its kept change leaves it (``after``, for the
        ids in ``kept``) or as its snapshot has it; ``jobs`` finds a task's job (see
        :func:`task_keys`)."""
        keys = task_keys(jobs, [t.job_id for t in tasks], [after[t.id] if t.id in kept else t for t in tasks])
        return cls.of(zip([t.id for t in tasks], keys))

    def set(self, task_id: str, key: TaskKey | None) -> None:
        """The task's part is now ``key`` (None: it no longer counts)."""
        self.set_all(((task_id, key),))

    def set_all(self, pairs: Iterable[tuple[str, TaskKey | None]]) -> None:
        """Each ``(task id, part)`` in turn, as :meth:`set` (a task may come more than once: its
        last part holds). The tables are added to with each changed part's net count
        (:meth:`_add_all`): a burst moves some 25,000 tasks out of a few thousand pending parts,
        and a task set twice to the part it had nets to nothing."""
        of_task = self.of_task
        net: dict[TaskKey, int] = {}
        get = net.get
        for task_id, key in pairs:
            old = of_task.get(task_id)
            if old == key:
                continue
            if old is not None:
                net[old] = get(old, 0) - 1
                if key is None:
                    del of_task[task_id]
                    continue
            of_task[task_id] = key
            net[key] = get(key, 0) + 1
        self._add_all(net)

    def _add_all(self, net: Mapping[TaskKey, int]) -> None:
        """Add ``n`` tasks of each part (``{part: n}``, ``n`` negative to take them away): who
        holds each worker per part, every other table once per (job, user, band, state), the
        parts' counts summed first (a worker is in the part; those tables do not look at it).
        The tables are sums, so net counts leave them as adding task by task would, and no
        count goes below zero on the way: each part's net count leaves it at its final value.
        """
        by_job: dict[tuple[str, str, int | None, str, int], int] = {}
        get = by_job.get
        per_worker = self.per_worker
        touched = self._touched.add
        for key, n in net.items():
            if not n:
                continue
            job, user, band, state, worker, kind, value = key
            at = (job, user, band, state, value)
            by_job[at] = get(at, 0) + n
            if worker is None or band is None:  # pending, or active with no stamped band
                continue
            touched(worker)
            held = per_worker.get(worker)
            if held is None:
                held = per_worker[worker] = {}
            holder = (user, band) + kind
            value = held.get(holder, 0) + n
            if value:
                held[holder] = value
            elif len(held) == 1:
                del per_worker[worker]
            else:
                del held[holder]
        # Each (job, user, band, state, value) entry added in line, with the tables as locals (a
        # burst adds some 35,000 entries; a method call each was about a tenth of ``set_all``'s
        # instructions): the same steps in the same order as before, so every table, and the
        # order of its keys (the published counts are stored as they iterate), ends the same.
        by_user, live_of_job, by_state = self.by_user, self.live_of_job, self.by_state
        by_band_user, worth_by_band_user = self.by_band_user, self.worth_by_band_user
        get_counts, get_live, get_state = by_user.get, live_of_job.get, by_state.get
        pending = PENDING_VALUE
        for (job, user, band, state, value), n in by_job.items():
            if not n:
                continue
            counts = get_counts(user)
            if counts is None:
                counts = by_user[user] = [0, 0, 0]
            before = get_live(job, 0)
            after = before + n
            if after:
                live_of_job[job] = after
                if not before:
                    counts[2] += 1
            else:
                del live_of_job[job]
                counts[2] -= 1
            if state == pending:
                counts[0] += n
            else:
                counts[1] += n
                left = get_state(state, 0) + n
                if left:
                    by_state[state] = left
                else:
                    del by_state[state]
                if band is not None:
                    users = by_band_user.get(band)
                    if users is None:
                        users = by_band_user[band] = {}
                        worths = worth_by_band_user[band] = {}
                    else:
                        worths = worth_by_band_user[band]
                    left = users.get(user, 0) + n
                    if left:
                        users[user] = left
                        worths[user] = worths.get(user, 0) + n * value
                    elif len(users) == 1:
                        del by_band_user[band]
                        del worth_by_band_user[band]
                    else:
                        del users[user]
                        del worths[user]
            if n < 0 and not (counts[0] or counts[1] or counts[2]):
                del by_user[user]

    def left_running(self, decision: Decision) -> dict[tuple[int, str], tuple[int, int]]:
        """``core.fairness.left_running`` of the tasks counted here (the snapshot's, before
        this tick's changes are set): the running tasks less those the decision stops. The
        tables per band and user, then a step per task the decision stops: its cost follows
        the decision's changes and the users, not the running tasks or their jobs."""
        running = self.running()
        of_task = self.of_task
        for task_id, moved in decision.after.items():
            if moved.state not in ACTIVE_STATES:
                key = of_task.get(task_id)
                if key is not None and key[2] is not None:
                    at = (key[2], key[1])
                    tasks, worth = running[at]
                    if tasks > 1:
                        running[at] = (tasks - 1, worth - key[6])
                    else:
                        del running[at]
        return running

    def running(self) -> dict[tuple[int, str], tuple[int, int]]:
        """``{(stamped band rank, user): (active tasks, their resource value)}``."""
        worth_by_band_user = self.worth_by_band_user
        return {
            (band, user): (n, worths[user])
            for band, users in self.by_band_user.items()
            for worths in (worth_by_band_user[band],)
            for user, n in users.items()
        }

    def published(self) -> tuple[dict, dict[str, dict[tuple[str, int, str, str, bool], int]]]:
        """``(active_counts(...), per_worker)``: copies, the caller's to keep and not to change.
        A worker's holders are copied again only when they changed since the last call; for the
        rest the last call's copy is given again (the same object), in ``per_worker``'s order."""
        per_worker, copies = self.per_worker, self._held_copies
        for worker in self._touched:
            held = per_worker.get(worker)
            if held is None:
                copies.pop(worker, None)
            else:
                copies[worker] = dict(held)
        self._touched.clear()
        return {
            "by_band_user": {str(band): dict(users) for band, users in self.by_band_user.items()},
            "by_state": dict(self.by_state),
            "by_user": {user: list(counts) for user, counts in self.by_user.items()},
        }, dict(zip(per_worker, map(copies.__getitem__, per_worker)))
