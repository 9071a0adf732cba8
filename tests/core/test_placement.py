"""Placement: capacity, constraints, gangs, job exhaustion, bands."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decision import decide
from scheduler.core.placement import ShapeBook
from scheduler.core.pool import WorkerPool
from scheduler.core.constraints import constraint_matches
from scheduler.core.types import TaskState
from tests.core.builders import (
    cluster,
    eq,
    exists,
    in_,
    job,
    ne,
    placed,
    reason_text,
    running,
    task,
    tpu_slice,
    worker,
)


def place(workers, jobs, tasks=(), **config):
    return placed(decide(cluster(workers, jobs, tasks, **config)))


def test_first_fit_in_worker_id_order():
    workers = [worker("w2"), worker("w1"), worker("w3")]
    assert place(workers, [job("/a/j", replicas=2, cpu=4)]) == {"/a/j/0": "w1", "/a/j/1": "w1"}


@pytest.mark.parametrize(
    "need, fits",
    [
        (dict(cpu=8), True),
        (dict(cpu=8.01), False),
        (dict(mem=32), True),
        (dict(mem=33), False),
        (dict(gpu=2, variant="h100"), True),
        (dict(gpu=3, variant="h100"), False),
    ],
)
def test_a_task_needs_enough_cpu_memory_and_devices(need, fits):
    workers = [worker("g", cpu=8, mem=32, gpu=2, variant="h100")]
    assert bool(place(workers, [job("/a/j", **{"cpu": 0, "mem": 0, **need})])) is fits


def test_tpu_chips_are_capacity_too():
    workers = [worker("t", cpu=100, mem=100, tpu=4, variant="v5p")]
    assert place(workers, [job("/a/j", replicas=3, tpu=2, variant="v5p")]) == {"/a/j/0": "t", "/a/j/1": "t"}


def test_running_and_assigned_tasks_hold_their_resources():
    workers = [worker("w", cpu=8, mem=32)]
    jobs = [job("/a/old", replicas=2, cpu=3), job("/a/new", cpu=3)]
    tasks = [running("/a/old/0", "w"), task("/a/old/1", TaskState.ASSIGNED, "w")]
    assert place(workers, jobs, tasks) == {}


def test_an_unfinished_earlier_attempt_still_holds_capacity():
    workers = [worker("w1", cpu=8), worker("w2", cpu=8)]
    jobs = [job("/a/retry", cpu=6), job("/a/other", cpu=6, submitted=1)]
    tasks = [task("/a/retry/0", TaskState.PENDING, unfinished_attempt_worker="w1")]
    assert place(workers, jobs, tasks) == {"/a/retry/0": "w2"}


def test_unhealthy_workers_take_no_work():
    assert place([worker("w", healthy=False)], [job("/a/j")]) == {}


def test_at_most_four_new_assignments_per_worker_per_tick():
    workers = [worker("w1", cpu=100), worker("w2", cpu=100)]
    assert (
        list(place(workers, [job("/a/j", replicas=6)], max_tasks_per_job_per_cycle=0).values())
        == ["w1"] * 4 + ["w2"] * 2
    )


def test_at_most_eight_building_tasks_per_worker():
    workers = [worker("w1", cpu=100), worker("w2", cpu=100)]
    building = [task(f"/a/old/{i}", TaskState.BUILDING, "w1") for i in range(6)] + [
        task("/a/old/6", TaskState.ASSIGNED, "w1")
    ]
    jobs = [job("/a/old", replicas=7, cpu=0, mem=0), job("/a/new", replicas=3, cpu=1)]
    assert place(workers, jobs, building) == {"/a/new/0": "w1", "/a/new/1": "w2", "/a/new/2": "w2"}


def test_a_cap_of_zero_means_unlimited():
    workers = [worker("w1", cpu=100)]
    jobs = [job("/a/j", replicas=12)]
    result = place(workers, jobs, max_assignments_per_worker=0, max_building_tasks=0, max_tasks_per_job_per_cycle=0)
    assert len(result) == 12


@pytest.mark.parametrize(
    "constraint, expected",
    [
        (eq("zone", "b"), "w2"),
        (ne("zone", "a"), "w2"),
        (in_("zone", "c", "b"), "w2"),
        (exists("spot"), "w3"),
        (ne("spot", "yes"), "w1"),  # a missing attribute is "not equal"
    ],
)
def test_hard_constraints_filter_workers(constraint, expected):
    workers = [worker("w1", zone="a"), worker("w2", zone="b"), worker("w3", zone="c", spot="yes")]
    assert place(workers, [job("/a/j", constraints=[constraint])]) == {"/a/j/0": expected}


def test_no_worker_matching_the_constraints_is_explained():
    decision = decide(cluster([worker("w1", zone="a")], [job("/a/j", constraints=[eq("zone", "z")])]))
    assert reason_text(decision, "/a/j/0").startswith("No healthy worker matches constraints [zone=z]")


def test_soft_constraints_rank_workers_without_filtering():
    workers = [worker("w1", zone="a"), worker("w2", zone="b", disk="ssd"), worker("w3", zone="b")]
    soft = [eq("zone", "b", soft=True), eq("disk", "ssd", soft=True)]
    assert place(workers, [job("/a/j", replicas=3, cpu=8, constraints=soft)]) == {
        "/a/j/0": "w2",
        "/a/j/1": "w3",
        "/a/j/2": "w1",
    }


def test_accelerator_jobs_need_their_device_type_and_variant():
    workers = [
        worker("a-cpu", cpu=64, mem=256),
        worker("b-a100", cpu=64, mem=256, gpu=8, variant="a100"),
        worker("c-h100", cpu=64, mem=256, gpu=8, variant="h100"),
    ]
    assert place(workers, [job("/a/j", gpu=1, variant="h100")]) == {"/a/j/0": "c-h100"}


def test_variant_auto_matches_any_variant_of_the_type():
    workers = [worker("a-tpu", tpu=4, variant="v5p"), worker("b-gpu", gpu=8, variant="a100")]
    assert place(workers, [job("/a/j", gpu=1, variant="auto")]) == {"/a/j/0": "b-gpu"}


def test_an_explicit_variant_constraint_replaces_the_automatic_one():
    workers = [worker("a", gpu=8, variant="a100"), worker("b", gpu=8, variant="h100"), worker("c", gpu=8, variant="l4")]
    jobs = [job("/a/j", replicas=2, cpu=4, gpu=4, variant="h100", constraints=[in_("device-variant", "a100", "h100")])]
    assert place(workers, jobs) == {"/a/j/0": "a", "/a/j/1": "a"}


def test_a_cpu_job_may_run_on_an_accelerator_host():
    assert place([worker("gpu", gpu=8, variant="h100")], [job("/a/j")]) == {"/a/j/0": "gpu"}


def test_a_gpu_job_never_lands_on_a_tpu_host():
    assert place([worker("tpu", tpu=8, variant="h100")], [job("/a/j", gpu=1, variant="h100")]) == {}


def test_job_exhaustion_does_not_block_other_jobs():
    """The big job's second task does not fit, so its third waits (even though it is not tried);
    the small job behind it still places: no head-of-line blocking."""
    workers = [worker("w1", cpu=8), worker("w2", cpu=2)]
    jobs = [job("/a/big", replicas=3, cpu=6, submitted=1), job("/a/small", cpu=2, submitted=2)]
    decision = decide(cluster(workers, jobs))
    assert placed(decision) == {"/a/big/0": "w1", "/a/small/0": "w1"}
    assert decision.pending_reasons["/a/big/2"].code == "job_exhausted"
    assert reason_text(decision, "/a/big/2").startswith("Waiting: an earlier task of this job did not fit")
    assert decision.pending_reasons["/a/big/1"].code == "waiting_behind"


def test_a_gang_places_all_or_nothing_in_one_group():
    workers = tpu_slice("s1", hosts=2) + tpu_slice("s2", hosts=4)
    decision = decide(cluster(workers, [job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")]))
    assert placed(decision) == {f"/a/g/{i}": f"s2-{i}" for i in range(4)}


def test_a_gang_that_fits_no_group_places_nothing():
    workers = tpu_slice("s1", hosts=2) + tpu_slice("s2", hosts=3)
    decision = decide(cluster(workers, [job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")]))
    assert placed(decision) == {}
    assert "need 4 workers in same 'tpu-name' group, largest group has 3" in reason_text(decision, "/a/g/0")


def test_gang_hosts_are_taken_in_numeric_tpu_worker_id_order():
    hosts = [worker(f"h{i}", tpu=4, variant="v5p", tpu_name="s", tpu_worker_id=str(i)) for i in (10, 2, 1, 9)]
    decision = decide(cluster(hosts, [job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")]))
    assert placed(decision) == {"/a/g/0": "h1", "/a/g/1": "h2", "/a/g/2": "h9", "/a/g/3": "h10"}


def test_gang_groups_rank_by_soft_score_then_group_value():
    workers = (
        tpu_slice("a", hosts=2)
        + tpu_slice("b", hosts=2)
        + [worker(f"c-{i}", tpu=4, variant="v5p", tpu_name="c", tpu_worker_id=str(i), zone="near") for i in range(2)]
    )
    plain = job("/a/g", replicas=2, tpu=4, variant="v5p", group_by="tpu-name")
    assert set(place(workers, [plain]).values()) == {"a-0", "a-1"}
    soft = job(
        "/a/g", replicas=2, tpu=4, variant="v5p", group_by="tpu-name", constraints=[eq("zone", "near", soft=True)]
    )
    assert set(place(workers, [soft]).values()) == {"c-0", "c-1"}


def test_a_gang_is_not_split_across_groups():
    workers = tpu_slice("s1", hosts=2) + tpu_slice("s2", hosts=2)
    assert place(workers, [job("/a/g", replicas=3, tpu=4, variant="v5p", group_by="tpu-name")]) == {}


def test_within_a_band_gangs_place_before_solo_tasks():
    workers = tpu_slice("s1", hosts=2)
    jobs = [
        job("/a/solo", tpu=4, variant="v5p", submitted=1),
        job("/b/gang", replicas=2, tpu=4, variant="v5p", group_by="tpu-name", submitted=2),
    ]
    assert place(workers, jobs) == {"/b/gang/0": "s1-0", "/b/gang/1": "s1-1"}


def test_a_batch_gang_does_not_take_a_host_an_interactive_task_needed():
    """Iris places every gang before any solo task; here bands go first."""
    workers = tpu_slice("s1", hosts=2)
    jobs = [
        job("/a/solo", band="interactive", tpu=4, variant="v5p", submitted=2),
        job("/b/gang", band="batch", replicas=2, tpu=4, variant="v5p", group_by="tpu-name", submitted=1),
    ]
    assert place(workers, jobs) == {"/a/solo/0": "s1-0"}


def test_assignments_carry_the_effective_band():
    decision = decide(cluster([worker("w")], [job("/a/j", band="production")]))
    assert [(a.task, a.worker, a.band.wire) for a in decision.assignments] == [("/a/j/0", "w", "production")]
    after = decision.after["/a/j/0"]
    assert (after.state, after.worker, after.band.wire) == (TaskState.ASSIGNED, "w", "production")


# Candidate lists are built from memoised per-constraint worker sets (ShapeBook._matching); this
# pins them to the plain definition: every healthy worker matching each hard constraint, best
# soft score first, then by id, whichever operators and values appear (including "auto").
_values = st.sampled_from(["a", "b", "c", "auto"])
_constraints = st.builds(
    lambda key, op, values, soft: {"eq": eq, "ne": ne, "exists": exists, "in": in_}[op](
        key, *([] if op == "exists" else values if op == "in" else values[:1]), soft=soft
    ),
    st.sampled_from(["zone", "pool", "device-variant"]),
    st.sampled_from(["eq", "ne", "in", "exists"]),
    st.lists(_values, min_size=1, max_size=3),
    st.booleans(),
)
_attrs = st.dictionaries(st.sampled_from(["zone", "pool"]), _values, max_size=2)


@settings(max_examples=200, deadline=None)
@given(
    hosts=st.lists(st.tuples(_attrs, st.sampled_from([None, "a", "b"]), st.booleans()), max_size=12),
    constraints=st.lists(_constraints, max_size=4),
)
def test_candidates_are_the_matching_healthy_workers_by_soft_score_then_id(hosts, constraints):
    workers = [
        worker(f"w{i:02d}", gpu=1 if variant else 0, variant=variant, healthy=healthy, **attrs)
        for i, (attrs, variant, healthy) in enumerate(reversed(hosts))
    ]
    snapshot = cluster(workers)
    pool = WorkerPool(snapshot, {}, [])
    hard = tuple(c for c in constraints if not c.soft)
    soft = tuple(c for c in constraints if c.soft)
    expected = sorted(
        (w for w in pool.by_id if all(constraint_matches(pool.attrs[w], c) for c in hard)),
        key=lambda w: (-sum(constraint_matches(pool.attrs[w], c) for c in soft), pool.ids[w]),
    )
    assert ShapeBook(pool).candidates(hard, soft) == expected


_slice_hosts = st.lists(
    st.tuples(
        st.sampled_from([None, "s1", "s2", "s3"]),  # tpu-name
        st.sampled_from([None, "0", "1", "2", "10", "x"]),  # tpu-worker-id
        st.sampled_from(["a", "b"]),  # zone
        st.booleans(),  # healthy
    ),
    max_size=12,
)
_zone_constraints = st.lists(
    st.builds(
        lambda op, values, soft: {"eq": eq, "ne": ne, "in": in_}[op](
            "zone", *(values if op == "in" else values[:1]), soft=soft
        ),
        st.sampled_from(["eq", "ne", "in"]),
        st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2),
        st.booleans(),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(hosts=_slice_hosts, first=_zone_constraints, second=_zone_constraints)
def test_gang_groups_are_the_candidates_by_group_value_ranked_by_soft_score_then_value(hosts, first, second):
    workers = [
        worker(f"w{i:02d}", tpu=4, variant="v5p", healthy=healthy, zone=zone, tpu_name=name, tpu_worker_id=wid)
        if name is not None and wid is not None
        else worker(
            f"w{i:02d}", tpu=4, variant="v5p", healthy=healthy, zone=zone, **({"tpu_name": name} if name else {})
        )
        for i, (name, wid, zone, healthy) in enumerate(hosts)
    ]
    pool = WorkerPool(cluster(workers), {}, [])
    book = ShapeBook(pool)
    # Two shapes in one book, as in a tick: the second sees groups the first already built
    # (whole ones shared, part ones of its own).
    for constraints in (first, second):
        shape = book.shape_of(
            job("/a/g", replicas=2, tpu=4, variant="v5p", group_by="tpu-name", constraints=constraints)
        )
        by_value = {}
        for w in shape.cands:
            value = pool.attrs[w].get("tpu-name")
            if value is not None:
                by_value.setdefault(value, []).append(w)
        ranked = sorted(
            by_value.items(),
            key=lambda item: (-sum(constraint_matches(pool.attrs[w], c) for w in item[1] for c in shape.soft), item[0]),
        )
        expected = [(value, sorted(members, key=book.host_order)) for value, members in ranked]
        assert [(g.value, list(g.members)) for g in book.groups(shape, "tpu-name")] == expected


def test_worker_pool_charges_runs_of_one_workers_tasks_as_each_task_alone():
    """A job whose tasks come in runs on one worker is charged a run at a time: the free
    capacity and build slots must be those of charging every task on its own (runs, split
    runs, mixed states, unknown workers, GPU and TPU requests)."""
    import random

    from scheduler.core.decision import _group_tasks

    rng = random.Random(7)
    for _ in range(20):
        workers = [worker(f"w{i}", cpu=1000, mem=4000, gpu=64, variant="h100") for i in range(5)]
        jobs, tasks = [], []
        for j in range(6):
            spec = job(f"/u{j}/j", replicas=12, cpu=rng.choice([1, 2]), mem=rng.choice([1, 3]), gpu=rng.choice([0, 1]))
            jobs.append(spec)
            names = [rng.choice(["w0", "w1", "w2", "w3", "w4", "gone"]) for _ in range(4)]
            for index in range(12):
                state = rng.choice([TaskState.RUNNING, TaskState.RUNNING, TaskState.ASSIGNED, TaskState.BUILDING])
                tasks.append(
                    task(
                        f"{spec.id}/{index}",
                        state,
                        names[min(index // 3, 3)] if rng.random() < 0.8 else rng.choice(names),
                    )
                )
        snapshot = cluster(workers, jobs, tasks)
        _, active_by_job, unfinished, _ = _group_tasks(snapshot.tasks)
        pool = WorkerPool(snapshot, active_by_job, unfinished)
        expected_cpu = [w.cpu_millicores for w in workers]
        expected_gpu = [w.device.count for w in workers]
        expected_building = [0] * len(workers)
        by_id = {w.id: i for i, w in enumerate(workers)}
        for t in tasks:
            w = by_id.get(t.worker)
            if w is not None:
                resources = snapshot.jobs[t.job_id].resources
                expected_cpu[w] -= resources.cpu_millicores
                expected_gpu[w] -= resources.device.count
                expected_building[w] += t.state is not TaskState.RUNNING
        assert pool.cpu == expected_cpu
        assert pool.gpu == expected_gpu
        assert pool.building == expected_building
