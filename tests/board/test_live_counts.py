"""The board's counts of live work, updated from changes, equal a full count after every tick.

Random sequences of ticks over a small cluster: each tick the real core decides, a random part
of its changes is kept (the rest "moved meanwhile"), and between ticks tasks end, fail, are
cancelled, arrive with new jobs, and budgets flip. The counts kept from tick to tick, updated
only with the tasks that changed (as the rows' change log lists them, duplicates and all) and
the changes each tick keeps, must equal ``active_counts`` over the whole snapshot every time.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.board.counts import LiveCounts, active_counts, after_key, snapshot_key
from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.types import TaskSnapshot, TaskState
from tests.core.builders import budget, cluster, job, worker

USERS = ("alice", "bob", "carol")
WORKERS = [worker("w0", cpu=4, mem=8), worker("w1", cpu=2, mem=4), worker("g0", cpu=8, mem=32, gpu=2, variant="h100")]
ENDS = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.WORKER_FAILED)

event = st.one_of(
    st.tuples(
        st.just("arrive"), st.sampled_from(USERS), st.sampled_from(list(Band)), st.integers(1, 3), st.integers(0, 2)
    ),
    st.tuples(st.just("end"), st.integers(0, 1000), st.sampled_from(ENDS)),
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("budget"), st.sampled_from(USERS), st.sampled_from([0, 1, 5, 50])),
    st.tuples(st.just("reread"), st.integers(0, 1000)),
)
tick = st.tuples(st.lists(event, max_size=6), st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(st.lists(tick, min_size=1, max_size=12))
def test_counts_updated_from_changes_equal_a_full_count_after_every_tick(ticks):
    jobs: dict = {}
    tasks: dict[str, TaskSnapshot] = {}
    limits = {user: 0 for user in USERS}
    counts = LiveCounts()
    changed: list[str] = []
    serial = 0
    for events, keep_seed in ticks:
        for e in events:
            ids = sorted(tasks)
            if e[0] == "arrive":
                _, user, band, replicas, gpu = e
                serial += 1
                spec = job(
                    f"/{user}/j{serial}",
                    band=band,
                    replicas=replicas,
                    cpu=1,
                    mem=1,
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
        live_jobs = [spec for spec in jobs.values() if any(t.job_id == spec.id for t in tasks.values())]
        base = cluster(WORKERS, budgets=[budget(u, limit, "production") for u, limit in limits.items()])
        # The tasks as the rows have them (a job's ended tasks are gone, not pending again).
        snapshot = replace(
            base, jobs={spec.id: spec for spec in live_jobs}, tasks=tuple(tasks[t] for t in sorted(tasks))
        )
        decision = decide(snapshot)
        moved = sorted(decision.after)
        kept = {t for i, t in enumerate(moved) if (keep_seed >> (i % 16)) & 1 or len(moved) < 3}

        by_id = {t.id: t for t in snapshot.tasks}
        for task_id in changed:
            task = by_id.get(task_id)
            counts.set(task_id, None if task is None else snapshot_key(task, snapshot.jobs[task.job_id]))
        for task_id in kept:
            job_id = by_id[task_id].job_id
            counts.set(task_id, after_key(snapshot.jobs[job_id], decision.after[task_id]))

        holders: dict = {}
        assert counts.published() == (active_counts(snapshot, decision, kept, per_worker=holders), holders)
        assert (
            counts.published()
            == LiveCounts.of(
                (
                    t.id,
                    after_key(snapshot.jobs[t.job_id], decision.after[t.id])
                    if t.id in kept
                    else snapshot_key(t, snapshot.jobs[t.job_id]),
                )
                for t in snapshot.tasks
            ).published()
        )

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
