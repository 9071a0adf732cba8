"""What a decision contains: coverage of pending work, state changes, job outcomes."""

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.explain import Downgrade, PerJobCap
from scheduler.core.types import JobState, TaskState
from scheduler.core.wire import decision_to_json, snapshot_from_json
from tests.core.builders import NOW, budget, cluster, eq, job, placed, running, task, tpu_slice, worker


def test_effective_bands_cover_every_task_pending_at_tick_start():
    jobs = [job("/a/late", deadline=NOW), job("/a/many", replicas=6), job("/a/run")]
    decision = decide(cluster([worker("w", cpu=100)], jobs, [running("/a/run/0", "w")]))
    assert set(decision.effective_bands) == {"/a/late/0"} | {f"/a/many/{i}" for i in range(6)}


def test_pending_reasons_cover_every_task_still_pending_and_nothing_else():
    jobs = [job("/a/late", deadline=NOW), job("/a/many", replicas=6, cpu=30)]
    decision = decide(cluster([worker("w", cpu=100)], jobs))
    assert set(decision.pending_reasons) == {f"/a/many/{i}" for i in range(3, 6)}


def test_spend_lists_only_users_who_spend():
    jobs = [job("/a/run", cpu=2, mem=0), job("/b/free", cpu=0, mem=0), job("/c/wait")]
    decision = decide(cluster([worker("w")], jobs, [running("/a/run/0", "w"), running("/b/free/0", "w")]))
    assert decision.spend == {"a": 10}


def test_after_lists_exactly_the_tasks_whose_state_changed():
    jobs = [job("/a/run"), job("/a/new"), job("/a/late", deadline=NOW)]
    decision = decide(cluster([worker("w")], jobs, [running("/a/run/0", "w")]))
    assert set(decision.after) == {"/a/new/0", "/a/late/0"}
    late = decision.after["/a/late/0"]
    assert (late.state, late.worker, late.band) == (TaskState.UNSCHEDULABLE, None, None)


def test_a_task_retried_after_preemption_keeps_its_count_when_assigned():
    decision = decide(cluster([worker("w")], [job("/a/j")], [task("/a/j/0", TaskState.PENDING, preemption_count=3)]))
    assert decision.after["/a/j/0"].preemption_count == 3


def test_a_pending_tasks_band_is_ignored():
    snapshot = cluster(
        [worker("w")], [job("/a/j", band="production")], [task("/a/j/0", TaskState.PENDING, band="batch")]
    )
    assert decide(snapshot).effective_bands["/a/j/0"] is Band.PRODUCTION


def test_a_gang_that_ends_cosched_failed_loses_the_assignments_it_got_this_tick():
    """/v/gang has two members RUNNING (stamped BATCH) on slice s1 and two pending that fit on s2.
    A PRODUCTION gang pinned to s1 evicts the running members, which have no retries left: the
    whole job ends COSCHED_FAILED, including the members just placed on s2."""
    workers = tpu_slice("s1", hosts=2) + tpu_slice("s2", hosts=2)
    jobs = [
        job("/v/gang", replicas=4, tpu=4, variant="v5p", group_by="tpu-name", max_retries_preemption=0),
        job(
            "/a/prod",
            band="production",
            replicas=2,
            tpu=4,
            variant="v5p",
            group_by="tpu-name",
            constraints=[eq("tpu-name", "s1")],
        ),
    ]
    tasks = [running("/v/gang/0", "s1-0", band="batch"), running("/v/gang/1", "s1-1", band="batch")]
    decision = decide(cluster(workers, jobs, tasks))
    assert placed(decision) == {"/a/prod/0": "s1-0", "/a/prod/1": "s1-1"}
    assert decision.jobs_after == {"/v/gang": JobState.COSCHED_FAILED}
    states = {t: decision.after[t].state for t in (f"/v/gang/{i}" for i in range(4))}
    assert states == {
        "/v/gang/0": TaskState.PREEMPTED,
        "/v/gang/1": TaskState.PREEMPTED,
        "/v/gang/2": TaskState.COSCHED_FAILED,
        "/v/gang/3": TaskState.COSCHED_FAILED,
    }
    assert not any(t.startswith("/v/gang") for t in decision.pending_reasons)


def test_unfinished_attempts_of_finished_tasks_still_hold_capacity():
    jobs = [job("/a/gone", cpu=8), job("/a/new", cpu=8)]
    tasks = [task("/a/gone/0", TaskState.PREEMPTED, unfinished_attempt_worker="w")]
    assert placed(decide(cluster([worker("w", cpu=8)], jobs, tasks))) == {}


def test_decide_does_not_depend_on_the_order_of_tasks_or_workers_in_the_snapshot():
    workers = [worker("b", cpu=4), worker("a", cpu=4), worker("c", cpu=4)]
    jobs = [
        job("/x/j", replicas=3, cpu=3),
        job("/y/k", replicas=2, cpu=2, band="batch"),
        job("/z/r", cpu=4, band="batch"),
    ]
    tasks = [running("/z/r/0", "c")]
    forward = cluster(workers, jobs, tasks)
    backward = cluster(workers[::-1], jobs[::-1], tasks)
    backward = type(backward)(
        backward.now_ms, backward.config, backward.budgets, backward.workers, backward.jobs, backward.tasks[::-1]
    )
    first, second = decide(forward), decide(backward)
    assert first.assignments == second.assignments
    assert first.preemptions == second.preemptions
    assert first.order == second.order


def test_a_pending_gang_member_ended_by_its_gang_failing_has_no_pending_reason():
    tpu = {"type": "tpu", "variant": "v5p-8", "count": 4}
    host = {"cpu_millicores": 8000, "memory_bytes": 16 << 30, "device": tpu}
    gang = {
        "resources": {"cpu_millicores": 1000, "memory_bytes": 1 << 30, "device": tpu},
        "coscheduling": {"group_by": "tpu-name"},
    }
    snapshot = snapshot_from_json(
        {
            "now_ms": 1_800_000_000_000,
            "workers": [
                {"id": f"tpu-{i}", **host, "attributes": {"tpu-name": "s1", "tpu-worker-id": str(i)}} for i in range(2)
            ],
            "jobs": [
                # Three members on a two-host slice: two run, the third can never join them.
                {
                    "id": "/bob/gang",
                    "band": "batch",
                    "replicas": 3,
                    "submitted_at_ms": 1,
                    "max_retries_preemption": 0,
                    **gang,
                },
                {"id": "/alice/gang", "band": "production", "replicas": 2, "submitted_at_ms": 2, **gang},
            ],
            "tasks": [
                {"id": "/bob/gang/0", "state": "running", "worker": "tpu-0", "band": "batch"},
                {"id": "/bob/gang/1", "state": "running", "worker": "tpu-1", "band": "batch"},
            ],
        }
    )

    decision = decision_to_json(decide(snapshot))

    assert decision["after"]["/bob/gang/2"]["state"] == "cosched_failed"
    assert "/bob/gang/2" not in decision["pending_reasons"]
    assert decision["jobs_after"]["/bob/gang"] == "cosched_failed"


def test_tasks_held_back_by_the_per_job_cap_carry_their_jobs_downgrade_or_none():
    """The per-job cap's reason is shared by every job without a downgrade; a downgraded job's
    held tasks still say why they run in a lower band."""
    workers = [worker("w", cpu=64, mem=256)]
    jobs = [
        job("/a/old", cpu=8, mem=32),
        job("/a/big", replicas=6),
        job("/b/big", replicas=6),
    ]
    snapshot = cluster(
        workers, jobs, [running("/a/old/0", "w")], budgets=[budget("a", 10)], max_tasks_per_job_per_cycle=4
    )
    reasons = decide(snapshot).pending_reasons
    a_held, b_held = reasons["/a/big/5"], reasons["/b/big/5"]
    assert isinstance(a_held.cause, PerJobCap) and isinstance(b_held.cause, PerJobCap)
    assert isinstance(a_held.downgrade, Downgrade)
    assert b_held.downgrade is None
    assert reasons["/a/big/4"] is a_held
