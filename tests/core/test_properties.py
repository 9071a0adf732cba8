"""Invariants of ``decide`` over random small clusters (hypothesis).

Whatever the snapshot: no worker goes over capacity or over its caps, no task is placed twice,
preemption only ever goes strictly downward in band and never for effective-BATCH work, gangs
place all-or-nothing, every pending task is explained, and the JSON round trip decides the same.
"""

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.constraints import request_tuple
from scheduler.core.types import ACTIVE_STATES, BUILDING_STATES, ClusterSnapshot, TaskSnapshot, TaskState
from scheduler.core.wire import decision_to_json, snapshot_from_json, snapshot_to_json
from tests.core.builders import budget, cluster, eq, job, task, worker

BANDS = list(Band)
USERS = ["ann", "bob", "cy"]
DEVICES = [
    {},
    {"gpu": 1, "variant": "h100"},
    {"gpu": 2, "variant": "a100"},
    {"gpu": 1, "variant": "auto"},
    {"tpu": 4, "variant": "v5p"},
]


@st.composite
def workers(draw):
    result = []
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["cpu", "gpu", "tpu"]))
        healthy = draw(st.integers(0, 9)) > 0
        cpu, mem = draw(st.integers(1, 8)), draw(st.integers(1, 32))
        zone = draw(st.sampled_from(["a", "b"]))
        if kind == "gpu":
            variant = draw(st.sampled_from(["h100", "a100"]))
            result.append(
                worker(f"w{i}", cpu, mem, gpu=draw(st.integers(1, 8)), variant=variant, healthy=healthy, zone=zone)
            )
        elif kind == "tpu":
            slice_name = draw(st.sampled_from(["s1", "s2"]))
            result.append(
                worker(
                    f"w{i}",
                    cpu,
                    mem,
                    tpu=4,
                    variant="v5p",
                    healthy=healthy,
                    zone=zone,
                    tpu_name=slice_name,
                    tpu_worker_id=str(i),
                )
            )
        else:
            result.append(worker(f"w{i}", cpu, mem, healthy=healthy, zone=zone))
    return result


@st.composite
def snapshots(draw) -> ClusterSnapshot:
    pool = draw(workers())
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        device = draw(st.sampled_from(DEVICES))
        gang = "tpu" in device and draw(st.booleans())
        constraints = (
            [eq("zone", draw(st.sampled_from(["a", "b"])), soft=draw(st.booleans()))] if draw(st.booleans()) else []
        )
        jobs.append(
            job(
                f"/{draw(st.sampled_from(USERS))}/j{i}",
                band=draw(st.sampled_from(BANDS)),
                replicas=draw(st.integers(1, 4)),
                cpu=draw(st.sampled_from([0, 0.5, 1, 2, 4])),
                mem=draw(st.sampled_from([0, 1, 4, 16])),
                group_by="tpu-name" if gang else None,
                constraints=constraints,
                submitted=draw(st.integers(0, 5)),
                max_retries_preemption=draw(st.integers(0, 2)),
                deadline=draw(st.sampled_from([None, None, None, 1_800_000_000_000])),
                **device,
            )
        )
    # Running work is laid out within capacity, as a consistent cluster would be.
    free = {w.id: list(request_tuple_of_worker(w)) for w in pool}
    tasks = []
    for spec in jobs:
        need = request_tuple(spec.resources)
        for index in range(spec.replicas):
            state = draw(
                st.sampled_from(
                    [
                        TaskState.PENDING,
                        TaskState.PENDING,
                        TaskState.RUNNING,
                        TaskState.RUNNING,
                        TaskState.ASSIGNED,
                        TaskState.BUILDING,
                    ]
                )
            )
            count = draw(st.integers(0, 3))
            if state is TaskState.PENDING:
                tasks.append(task(f"{spec.id}/{index}", state, preemption_count=count))
                continue
            host = next((w for w in pool if all(r >= n for r, n in zip(free[w.id], need))), None)
            if host is None:
                tasks.append(task(f"{spec.id}/{index}", TaskState.PENDING, preemption_count=count))
                continue
            room = free[host.id]
            free[host.id] = [r - n for r, n in zip(room, need)]
            stamped = draw(st.sampled_from([spec.band, Band.BATCH]))
            tasks.append(task(f"{spec.id}/{index}", state, host.id, stamped, count))
    budgets = [budget(user, draw(st.sampled_from([0, 1, 500, 5000]))) for user in USERS if draw(st.booleans())]
    return cluster(
        pool,
        jobs,
        tasks,
        budgets=budgets,
        budget_limit=draw(st.sampled_from([0, 1000])),
        max_tasks_per_job_per_cycle=draw(st.sampled_from([0, 1, 4])),
        max_assignments_per_worker=draw(st.sampled_from([0, 1, 4])),
        max_building_tasks=draw(st.sampled_from([0, 2, 8])),
    )


@st.composite
def crowded(draw) -> ClusterSnapshot:
    """A few hosts packed with running work in random stamped bands, and pending work in random
    bands that mostly does not fit: the preemption pass has to choose."""
    pool = [
        worker(f"c{i}", cpu=draw(st.integers(2, 8)), mem=64, zone=draw(st.sampled_from(["a", "b"])))
        for i in range(draw(st.integers(1, 3)))
    ]
    if draw(st.booleans()):
        pool.append(worker("g0", cpu=16, mem=64, gpu=4, variant="h100"))
    jobs, tasks = [], []
    for w in pool:
        left = w.cpu_millicores // 1000
        n = 0
        while left > 0:
            cores = min(left, draw(st.integers(1, 4)))
            gpu = 1 if w.device.gpu_count and draw(st.booleans()) else 0
            spec = job(
                f"/{draw(st.sampled_from(USERS))}/run-{w.id}-{n}",
                band=draw(st.sampled_from(BANDS)),
                cpu=cores,
                mem=1,
                gpu=gpu,
                variant="h100" if gpu else None,
                max_retries_preemption=draw(st.integers(0, 1)),
            )
            jobs.append(spec)
            tasks.append(task(f"{spec.id}/0", TaskState.RUNNING, w.id, draw(st.sampled_from([spec.band, Band.BATCH]))))
            left -= cores
            n += 1
    for i in range(draw(st.integers(1, 6))):
        gpu = 1 if draw(st.integers(0, 3)) == 0 else 0
        jobs.append(
            job(
                f"/{draw(st.sampled_from(USERS))}/new{i}",
                band=draw(st.sampled_from(BANDS)),
                replicas=draw(st.integers(1, 3)),
                cpu=draw(st.integers(1, 8)),
                mem=1,
                gpu=gpu,
                variant="h100" if gpu else None,
                submitted=i,
            )
        )
    budgets = [budget(user, draw(st.sampled_from([0, 0, 10]))) for user in USERS]
    return cluster(pool, jobs, tasks, budgets=budgets, max_assignments_per_worker=draw(st.sampled_from([0, 1, 4])))


def request_tuple_of_worker(w):
    return (w.cpu_millicores, w.memory_bytes, w.device.gpu_count, w.device.tpu_count)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLUSTERS = st.one_of(snapshots(), crowded())


def start_usage(snapshot: ClusterSnapshot, exclude: set[str]) -> dict[str, list[int]]:
    usage = {w.id: [0, 0, 0, 0] for w in snapshot.workers}
    for t in snapshot.tasks:
        need = request_tuple(snapshot.jobs[t.job_id].resources)
        for holder in (
            t.worker if t.state in ACTIVE_STATES and t.id not in exclude else None,
            t.unfinished_attempt_worker,
        ):
            if holder in usage:
                usage[holder] = [u + n for u, n in zip(usage[holder], need)]
    return usage


@PROPERTY
@given(CLUSTERS)
def test_no_worker_ends_over_capacity(snapshot):
    decision = decide(snapshot)
    victims = {p.victim for p in decision.preemptions}
    usage = start_usage(snapshot, exclude=victims)
    for a in decision.assignments:
        need = request_tuple(snapshot.jobs[a.task.rpartition("/")[0]].resources)
        usage[a.worker] = [u + n for u, n in zip(usage[a.worker], need)]
    for w in snapshot.workers:
        if any(a.worker == w.id for a in decision.assignments):
            assert all(u <= t for u, t in zip(usage[w.id], request_tuple_of_worker(w))), w.id


@PROPERTY
@given(CLUSTERS)
def test_caps_and_health_are_respected(snapshot):
    decision = decide(snapshot)
    config = snapshot.config
    healthy = {w.id for w in snapshot.workers if w.healthy}
    preemptors = {p.preemptor for p in decision.preemptions}
    building = Counter(t.worker for t in snapshot.tasks if t.state in BUILDING_STATES)
    new = Counter(a.worker for a in decision.assignments)
    placed_plainly = Counter(a.worker for a in decision.assignments if a.task not in preemptors)
    for w, n in new.items():
        assert w in healthy
        if config.max_building_tasks:
            assert building[w] + n <= config.max_building_tasks
        if config.max_assignments_per_worker:
            assert placed_plainly[w] <= config.max_assignments_per_worker


@PROPERTY
@given(CLUSTERS)
def test_each_pending_task_is_placed_at_most_once_and_only_pending_tasks_are_placed(snapshot):
    decision = decide(snapshot)
    tasks = [a.task for a in decision.assignments]
    assert len(tasks) == len(set(tasks))
    pending = {t.id for t in snapshot.tasks if t.state is TaskState.PENDING}
    assert set(tasks) <= pending
    assert set(tasks) <= set(decision.order)
    for a in decision.assignments:
        assert a.band is decision.effective_bands[a.task]


@PROPERTY
@given(CLUSTERS)
def test_preemption_only_goes_strictly_down_and_never_for_batch_work(snapshot):
    decision = decide(snapshot)
    by_id = {t.id: t for t in snapshot.tasks}
    victims = [p.victim for p in decision.preemptions]
    assert len(victims) == len(set(victims))
    assigned = {a.task: a.worker for a in decision.assignments}
    for p in decision.preemptions:
        victim = by_id[p.victim]
        assert victim.state is TaskState.RUNNING
        stamped = victim.band if victim.band is not None else snapshot.jobs[victim.job_id].band
        assert p.victim_band is stamped
        assert p.victim_band > p.preemptor_band
        assert p.preemptor_band is not Band.BATCH
        assert decision.effective_bands[p.preemptor] is p.preemptor_band
        assert victim.job_id != p.preemptor.rpartition("/")[0]
        preemptor_job = snapshot.jobs[p.preemptor.rpartition("/")[0]]
        if not preemptor_job.is_gang:
            assert not snapshot.jobs[victim.job_id].is_gang
            assert assigned[p.preemptor] == p.worker == victim.worker


@PROPERTY
@given(CLUSTERS)
def test_gangs_place_all_or_nothing(snapshot):
    decision = decide(snapshot)
    assigned = Counter(a.task.rpartition("/")[0] for a in decision.assignments)
    in_order = Counter(t.rpartition("/")[0] for t in decision.order)
    for job_id, count in assigned.items():
        if snapshot.jobs[job_id].is_gang:
            assert count == in_order[job_id]


@PROPERTY
@given(CLUSTERS)
def test_every_pending_task_is_accounted_for(snapshot):
    decision = decide(snapshot)
    pending = {t.id for t in snapshot.tasks if t.state is TaskState.PENDING}
    assert set(decision.effective_bands) == pending
    still_pending = {t for t, after in decision.after.items() if after.state is TaskState.PENDING}
    untouched = pending - set(decision.after)
    assert set(decision.pending_reasons) == still_pending | untouched
    for reason in decision.pending_reasons.values():
        assert reason.text()
    for after in decision.after.values():
        if after.state is not TaskState.ASSIGNED:
            assert after.worker is None and after.band is None


@settings(max_examples=60, deadline=None)
@given(CLUSTERS)
def test_the_json_round_trip_decides_the_same(snapshot):
    assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot
    assert decision_to_json(decide(snapshot_from_json(snapshot_to_json(snapshot)))) == decision_to_json(
        decide(snapshot)
    )


def test_deciding_twice_gives_the_same_decision():
    """decide never mutates its input (frozen types), so the same snapshot decides the same twice."""
    snapshot = cluster([worker("w")], [job("/a/j", replicas=2)], [TaskSnapshot("/a/j/0", "/a/j", 0)])
    assert decision_to_json(decide(snapshot)) == decision_to_json(decide(snapshot))
