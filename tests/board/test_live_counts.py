"""The board's counts of live work, updated from changes, equal a full count after every tick.

Random sequences of ticks over a small cluster: each tick the real core decides, a random part
of its changes is kept (the rest "moved meanwhile"), and between ticks tasks end, fail, are
cancelled, arrive with new jobs, budgets flip and workers go unhealthy or heal
(:func:`simulated_ticks`, which ``test_publication`` reuses). The counts kept from tick to tick, updated
only with the tasks that changed (as the rows' change log lists them, duplicates and all) and
the changes each tick keeps, must equal ``active_counts`` over the whole snapshot every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.board.publish import _rewritten_unchanged
from scheduler.board.counts import LiveCounts, active_counts, after_key, snapshot_key, task_keys
from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.core.decision import decide
from scheduler.core.types import ACTIVE_STATES, ClusterSnapshot, Decision, TaskAfter, TaskSnapshot, TaskState
from tests.core.builders import budget, cluster, job, worker

USERS = ("alice", "bob", "carol")
WORKERS = [worker("w0", cpu=2, mem=8), worker("w1", cpu=1, mem=4), worker("g0", cpu=2, mem=32, gpu=2, variant="h100")]
ENDS = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.WORKER_FAILED)

event = st.one_of(
    st.tuples(
        st.just("arrive"),
        st.sampled_from(USERS),
        st.sampled_from(list(Band)),
        st.integers(1, 6),
        st.integers(0, 2),
        st.sampled_from([0.5, 1, 2]),
        # GiB of memory: with half a core and none, a task is worth nothing
        # (``core.budget.resource_value``) and its user still has demand where it runs.
        st.sampled_from([0, 1]),
    ),
    st.tuples(st.just("end"), st.integers(0, 1000), st.sampled_from(ENDS)),
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("budget"), st.sampled_from(USERS), st.sampled_from([0, 1, 5, 50])),
    st.tuples(st.just("reread"), st.integers(0, 1000)),
    st.tuples(st.just("worker"), st.integers(0, 1000)),
    # An active task keeps its state but is stamped another band, or is on another worker (as
    # the rows may have it after a write the tick did not make).
    st.tuples(st.just("restamp"), st.integers(0, 1000), st.sampled_from(list(Band))),
    st.tuples(st.just("relocate"), st.integers(0, 1000), st.integers(0, len(WORKERS) - 1)),
)
# A tick: the events before it, which of its changes it keeps (bits), and whether the workers
# reported every assigned task started first (running tasks are what preemption evicts).
tick = st.tuples(st.lists(event, max_size=8), st.integers(0, 2**16), st.booleans())


@dataclass(frozen=True)
class SimulatedTick:
    """One tick of :func:`simulated_ticks`: its snapshot and decision, the tasks the rows'
    change log lists since the previous tick (duplicates and all) and the changes it keeps."""

    snapshot: ClusterSnapshot
    decision: Decision
    changed: list[str]
    kept: set[str]


def simulated_ticks(ticks) -> Iterator[SimulatedTick]:
    """Random ticks over a small cluster (the strategy ``tick``'s draws): before each, tasks end,
    fail, are cancelled, arrive with new jobs, start running, budgets flip and workers go unhealthy
    or heal; the
    real core decides; a random part of its changes is kept (the rest "moved meanwhile") and
    reaches the rows. The workers tuple stays the same object while no worker changed, as the
    rows keep it (``store.cluster_rows``)."""
    jobs: dict = {}
    tasks: dict[str, TaskSnapshot] = {}
    limits = {user: 0 for user in USERS}
    workers = tuple(WORKERS)
    changed: list[str] = []
    serial = 0
    for events, keep_seed, started in ticks:
        if started:
            for task_id, task in tasks.items():
                if task.state in (TaskState.ASSIGNED, TaskState.BUILDING):
                    tasks[task_id] = replace(task, state=TaskState.RUNNING)
                    changed.append(task_id)
        for e in events:
            ids = sorted(tasks)
            if e[0] == "arrive":
                _, user, band, replicas, gpu, cpu, *memory = e
                mem = memory[0] if memory else 1
                serial += 1
                spec = job(
                    f"/{user}/j{serial}",
                    band=band,
                    replicas=replicas,
                    cpu=cpu,
                    mem=mem,
                    gpu=gpu,
                    variant="h100" if gpu else None,
                    submitted=serial,
                )
                jobs[spec.id] = spec
                for i in range(replicas):
                    tasks[f"{spec.id}/{i}"] = TaskSnapshot(f"{spec.id}/{i}", spec.id, i)
                    changed.append(f"{spec.id}/{i}")
            elif e[0] == "end" and ids:
                task_id = ids[e[1] % len(ids)]
                del tasks[task_id]  # finished: no longer a row the cluster keeps
                changed.append(task_id)
            elif e[0] == "cancel" and ids:
                job_id = tasks[ids[e[1] % len(ids)]].job_id
                for task_id in [t for t in ids if tasks[t].job_id == job_id]:
                    del tasks[task_id]
                    changed.append(task_id)
                del jobs[job_id]
            elif e[0] == "budget":
                limits[e[1]] = e[2]
            elif e[0] == "reread" and ids:
                changed.append(ids[e[1] % len(ids)])  # read again unchanged: listed all the same
            elif e[0] in ("restamp", "relocate") and ids:
                task_id = ids[e[1] % len(ids)]
                task = tasks[task_id]
                if task.state in (TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING):
                    if e[0] == "restamp":
                        tasks[task_id] = replace(task, band=e[2])
                    else:
                        tasks[task_id] = replace(task, worker=workers[e[2]].id)
                    changed.append(task_id)
            elif e[0] == "worker":
                i = e[1] % len(workers)
                flipped = replace(workers[i], healthy=not workers[i].healthy)
                workers = (*workers[:i], flipped, *workers[i + 1 :])
        live_jobs = [spec for spec in jobs.values() if any(t.job_id == spec.id for t in tasks.values())]
        base = cluster((), budgets=[budget(u, limit, "production") for u, limit in limits.items()])
        # The tasks as the rows have them (a job's ended tasks are gone, not pending again).
        snapshot = replace(
            base,
            workers=workers,
            jobs={spec.id: spec for spec in live_jobs},
            tasks=tuple(tasks[t] for t in sorted(tasks)),
        )
        decision = decide(snapshot)
        moved = sorted(decision.after)
        kept = {t for i, t in enumerate(moved) if (keep_seed >> (i % 16)) & 1 or len(moved) < 3}
        yield SimulatedTick(snapshot, decision, changed, kept)

        # The tick's kept writes reach the rows (and the change log); the rest did not happen.
        changed = []
        for task_id in kept:
            after = decision.after[task_id]
            if after.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED):
                del tasks[task_id]
            else:
                tasks[task_id] = replace(
                    tasks[task_id],
                    state=after.state,
                    worker=after.worker,
                    band=after.band,
                    preemption_count=after.preemption_count,
                )
            changed.append(task_id)


def set_changes(
    counts: LiveCounts, tick: SimulatedTick, *, one_by_one: bool, written: SimulatedTick | None = None
) -> None:
    """Set the tasks the change log lists to their snapshot state (gone: no longer counted):
    one ``set`` of a ``task_key`` each, or all at once with ``task_keys`` (what the tick does).
    ``written``: the tick whose kept changes the counts last set; those the snapshot has as they
    were written are left out first, as the tick leaves them out
    (``publish._rewritten_unchanged``)."""
    by_id = {t.id: t for t in tick.snapshot.tasks}
    jobs = tick.snapshot.jobs
    changed = tick.changed
    if written is not None:
        rows = {task.id: SimpleNamespace(pk=pk) for pk, task in enumerate(tick.snapshot.tasks)}
        snapshots = dict(enumerate(tick.snapshot.tasks))
        changed = _rewritten_unchanged(
            list(dict.fromkeys(changed)), (written.kept, written.decision.after), rows, snapshots
        )
    tasks = [by_id.get(task_id) for task_id in changed]
    if one_by_one:
        for task_id, task in zip(changed, tasks):
            counts.set(task_id, None if task is None else snapshot_key(task, jobs[task.job_id]))
    else:
        job_ids = [task.job_id if task is not None else "" for task in tasks]
        counts.set_all(zip(changed, task_keys(jobs.__getitem__, job_ids, tasks)))


def set_kept(counts: LiveCounts, tick: SimulatedTick, *, one_by_one: bool) -> None:
    """Set the tasks the tick changed to their state after its kept changes."""
    jobs, after = tick.snapshot.jobs, tick.decision.after
    ids = sorted(tick.kept)
    job_ids = [task_id[: task_id.rfind("/")] for task_id in ids]
    if one_by_one:
        for task_id, job_id in zip(ids, job_ids):
            counts.set(task_id, after_key(jobs[job_id], after[task_id]))
    else:
        counts.set_all(zip(ids, task_keys(jobs.__getitem__, job_ids, [after[task_id] for task_id in ids])))


@settings(max_examples=60, deadline=None)
@given(st.lists(tick, min_size=1, max_size=12))
def test_counts_updated_from_changes_equal_a_full_count_after_every_tick(ticks):
    counts, counts_by_one, counts_skipping = LiveCounts(), LiveCounts(), LiveCounts()
    previous = None
    given_before: dict = {}
    given_repr: dict = {}
    for simulated in simulated_ticks(ticks):
        snapshot, decision, kept = simulated.snapshot, simulated.decision, simulated.kept
        set_changes(counts, simulated, one_by_one=False)
        set_kept(counts, simulated, one_by_one=False)
        set_changes(counts_by_one, simulated, one_by_one=True)
        set_kept(counts_by_one, simulated, one_by_one=True)
        # Leaving out the previous tick's writes read back as written (what the tick does).
        set_changes(counts_skipping, simulated, one_by_one=False, written=previous)
        set_kept(counts_skipping, simulated, one_by_one=False)
        previous = simulated

        holders: dict = {}
        published, given = counts.published()
        assert (published, given) == (active_counts(snapshot, decision, kept, per_worker=holders), holders)
        # The holders are copies (never the tables), in the tables' order; a copy handed out
        # again (the worker's holders untouched since) still equals what it was given as.
        assert repr(given) == repr({name: dict(held) for name, held in counts.per_worker.items()})
        for name, held in given.items():
            assert held is not counts.per_worker[name]
            if given_before.get(name) is held:
                assert repr(held) == given_repr[name]
        given_before, given_repr = given, {name: repr(held) for name, held in given.items()}
        assert counts_by_one.published() == counts.published()
        assert counts_by_one.of_task == counts.of_task
        assert counts_skipping.published() == counts.published()
        assert counts_skipping.of_task == counts.of_task
        # Counted over every task at once (a new tick process), as the tick does.
        whole = LiveCounts.of_tasks(snapshot.tasks, snapshot.jobs.__getitem__, decision.after, kept)
        assert whole.published() == counts.published()
        assert whole.of_task == counts.of_task
        # The running tasks and their value per (stamped band, user), the fairness sample's start.
        assert counts.running() == running_after(snapshot, decision, kept)
        assert whole.running() == counts_by_one.running() == counts_skipping.running() == counts.running()
        listed = LiveCounts.of(
            (
                t.id,
                after_key(snapshot.jobs[t.job_id], decision.after[t.id])
                if t.id in kept
                else snapshot_key(t, snapshot.jobs[t.job_id]),
            )
            for t in snapshot.tasks
        )
        assert counts.published() == listed.published()
        # ``of_tasks`` is ``of`` over the same tasks, in the same order too: the tick stores the
        # published tables as they iterate, so the order is in the bytes it writes.
        assert list(whole.of_task.items()) == list(listed.of_task.items())
        assert repr(whole.published()) == repr(listed.published())


def running_after(snapshot: ClusterSnapshot, decision: Decision, kept: set[str]) -> dict:
    """Task by task: ``{(stamped band rank, user): (active tasks, their resource value)}``
    after the tick's kept changes."""
    out: dict = {}
    for task in snapshot.tasks:
        now = decision.after[task.id] if task.id in kept else task
        if now.state in ACTIVE_STATES and now.band is not None:
            spec = snapshot.jobs[task.job_id]
            tasks, worth = out.get((int(now.band), spec.user), (0, 0))
            out[(int(now.band), spec.user)] = (tasks + 1, worth + resource_value(spec.resources))
    return out


def test_the_previous_tick_s_writes_read_back_as_written_are_left_out_of_the_change_log():
    written = {
        "/a/j/0": TaskAfter(TaskState.ASSIGNED, "w0", Band.BATCH, 0),
        "/a/j/1": TaskAfter(TaskState.ASSIGNED, "w0", Band.BATCH, 0),
        "/a/j/2": TaskAfter(TaskState.ASSIGNED, "w0", Band.BATCH, 0),
        "/a/j/3": TaskAfter(TaskState.ASSIGNED, "w0", Band.BATCH, 0),
        "/a/j/4": TaskAfter(TaskState.PENDING, None, None, 1),
        "/a/j/5": TaskAfter(TaskState.ASSIGNED, "w0", Band.BATCH, 0),
    }
    now = [
        TaskSnapshot("/a/j/0", "/a/j", 0, TaskState.ASSIGNED, "w0", Band.BATCH),  # as written
        TaskSnapshot("/a/j/1", "/a/j", 1, TaskState.ASSIGNED, "w1", Band.BATCH),  # another worker
        TaskSnapshot("/a/j/2", "/a/j", 2, TaskState.ASSIGNED, "w0", Band.PRODUCTION),  # another band
        TaskSnapshot("/a/j/3", "/a/j", 3, TaskState.RUNNING, "w0", Band.BATCH),  # another state
        TaskSnapshot("/a/j/4", "/a/j", 4, TaskState.PENDING, None, None, 1),  # as written
        TaskSnapshot("/a/j/6", "/a/j", 6, TaskState.PENDING),  # not written by that tick
    ]  # /a/j/5: gone
    rows = {task.id: SimpleNamespace(pk=pk) for pk, task in enumerate(now)}
    listed = ["/a/j/0", "/a/j/1", "/a/j/2", "/a/j/3", "/a/j/4", "/a/j/5", "/a/j/6"]
    left = _rewritten_unchanged(listed, (set(written) - {"/a/j/6"}, written), rows, dict(enumerate(now)))
    assert left == ["/a/j/1", "/a/j/2", "/a/j/3", "/a/j/5", "/a/j/6"]


def test_published_copies_a_worker_s_holders_again_only_once_they_changed():
    band = Band.BATCH.value
    counts = LiveCounts.of(
        [
            ("j/0", ("j", "ann", band, "running", "w1", ("cpu", "", False), 1)),
            ("j/1", ("j", "ann", band, "running", "w2", ("cpu", "", False), 1)),
        ]
    )
    _, first = counts.published()
    counts.set("k/0", ("k", "bob", None, "pending", None, ("cpu", "", False), 1))  # on no worker
    _, second = counts.published()
    assert second == first and all(second[w] is first[w] for w in first)
    counts.set("k/0", ("k", "bob", band, "running", "w2", ("cpu", "", False), 1))
    counts.set("j/0", None)
    _, third = counts.published()
    assert third == {"w2": {("ann", band, "cpu", "", False): 1, ("bob", band, "cpu", "", False): 1}}
    assert third["w2"] is not second["w2"] and second["w2"] == {("ann", band, "cpu", "", False): 1}
