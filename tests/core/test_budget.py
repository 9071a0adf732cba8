"""Resource value, spend and the effective band (reference §2, §3.5)."""

import pytest

from scheduler.core.bands import Band
from scheduler.core.budget import effective_band, resource_value, user_spend
from scheduler.core.decision import decide
from scheduler.core.types import BudgetDefaults, Resources, TaskState
from tests.core.builders import GIB, budget, cluster, device, job, placed, running, task, worker


@pytest.mark.parametrize(
    "cores, gib, gpu, tpu, value",
    [
        (4, 16, 0, 0, 36),
        (8, 64, 4, 0, 4104),
        (96, 320, 0, 8, 8800),
        (1.5, 1.5, 0, 0, 6),  # fractions of a core and of a GiB are dropped
        (48, 1700, 8, 0, 9940),
        (0, 0, 0, 0, 0),
        (0.999, 0.999, 0, 0, 0),
    ],
)
def test_resource_value_is_1000_per_chip_1_per_gib_5_per_core(cores, gib, gpu, tpu, value):
    resources = Resources(int(cores * 1000), int(gib * GIB), device(gpu=gpu, tpu=tpu, variant="x"))
    assert resource_value(resources) == value


def test_spend_sums_value_times_active_tasks_per_user():
    jobs = {
        "/alice/a": job("/alice/a", cpu=4, mem=16, replicas=3),  # 36 each
        "/alice/b": job("/alice/b", gpu=1, variant="h100", cpu=0, mem=0),  # 1000
        "/bob/c": job("/bob/c", cpu=2, mem=0),  # 10
    }
    tasks = [
        running("/alice/a/0", "w"),
        task("/alice/a/1", TaskState.ASSIGNED, "w"),
        task("/alice/a/2", TaskState.BUILDING, "w"),
        running("/alice/b/0", "w"),
        running("/bob/c/0", "w"),
    ]
    assert user_spend(jobs, tasks) == {"alice": 3 * 36 + 1000, "bob": 10}


@pytest.mark.parametrize(
    "state", [TaskState.PENDING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.PREEMPTED, TaskState.KILLED]
)
def test_pending_and_finished_tasks_cost_nothing(state):
    jobs = {"/alice/a": job("/alice/a", cpu=4, mem=16)}
    assert user_spend(jobs, [task("/alice/a/0", state, None)]) == {}


def test_batch_requested_work_costs_nothing_but_work_stamped_batch_still_counts():
    jobs = {
        "/alice/batch": job("/alice/batch", band="batch", cpu=4, mem=16),
        "/alice/inter": job("/alice/inter", band="interactive", cpu=4, mem=16),
    }
    tasks = [running("/alice/batch/0", "w", band="batch"), running("/alice/inter/0", "w", band="batch")]
    assert user_spend(jobs, tasks) == {"alice": 36}


def test_system_and_production_work_count_towards_spend():
    jobs = {
        "/root/sys": job("/root/sys", band="system", cpu=4, mem=16),
        "/root/prod": job("/root/prod", band="production", cpu=4, mem=16),
    }
    assert user_spend(jobs, [running("/root/sys/0", "w"), running("/root/prod/0", "w")]) == {"root": 72}


def test_users_with_zero_spend_are_left_out():
    jobs = {"/alice/tiny": job("/alice/tiny", cpu=0.5, mem=0.5)}
    assert user_spend(jobs, [running("/alice/tiny/0", "w")]) == {}


@pytest.mark.parametrize(
    "requested, spend, limit, expected",
    [
        (Band.INTERACTIVE, 10_001, 10_000, Band.BATCH),  # strictly over
        (Band.INTERACTIVE, 10_000, 10_000, Band.INTERACTIVE),  # equal is not over
        (Band.INTERACTIVE, 10**9, 0, Band.INTERACTIVE),  # limit 0 is unlimited
        (Band.INTERACTIVE, 0, 10_000, Band.INTERACTIVE),
        (Band.PRODUCTION, 10**9, 1, Band.PRODUCTION),  # admin bands are never downgraded
        (Band.SYSTEM, 10**9, 1, Band.SYSTEM),
        (Band.BATCH, 10**9, 1, Band.BATCH),
        (Band.BATCH, 0, 1, Band.BATCH),
    ],
)
def test_effective_band(requested, spend, limit, expected):
    budgets = {"alice": budget("alice", limit)}
    assert effective_band(requested, "alice", {"alice": spend}, budgets, BudgetDefaults()) is expected


def test_users_without_a_budget_row_get_the_cluster_default_limit():
    defaults = BudgetDefaults(budget_limit=1000)
    assert effective_band(Band.INTERACTIVE, "carol", {"carol": 1001}, {}, defaults) is Band.BATCH
    assert effective_band(Band.INTERACTIVE, "carol", {"carol": 1000}, {}, defaults) is Band.INTERACTIVE
    assert effective_band(Band.INTERACTIVE, "carol", {}, {}, defaults) is Band.INTERACTIVE


def gpu_user_snapshot(running_gpus: int, limit: int):
    """alice runs ``running_gpus`` 1-GPU INTERACTIVE tasks (1000 points each) and has one pending."""
    workers = [worker("gpu-0", cpu=64, mem=512, gpu=8, variant="h100")]
    jobs = [
        job("/alice/running", replicas=max(running_gpus, 1), cpu=0, mem=0, gpu=1, variant="h100"),
        job("/alice/next", cpu=0, mem=0, gpu=1, variant="h100", submitted=1),
    ]
    tasks = [running(f"/alice/running/{i}", "gpu-0", band="interactive") for i in range(running_gpus)]
    if not running_gpus:
        tasks = [task("/alice/running/0", TaskState.SUCCEEDED)]
    return cluster(workers, jobs, tasks, budgets=[budget("alice", limit)])


def test_over_budget_interactive_runs_as_batch():
    decision = decide(gpu_user_snapshot(running_gpus=3, limit=2500))
    assert decision.spend == {"alice": 3000}
    assert decision.effective_bands["/alice/next/0"] is Band.BATCH
    assert [(a.task, a.band) for a in decision.assignments] == [("/alice/next/0", Band.BATCH)]


def test_spend_equal_to_the_limit_keeps_interactive():
    decision = decide(gpu_user_snapshot(running_gpus=3, limit=3000))
    assert decision.effective_bands["/alice/next/0"] is Band.INTERACTIVE


def test_a_downgraded_user_is_re_promoted_once_back_under_budget():
    """Pending work always starts from the requested band, so the next tick after the user's
    spend drops, the same pending task is INTERACTIVE again."""
    over = decide(gpu_user_snapshot(running_gpus=3, limit=2500))
    under = decide(gpu_user_snapshot(running_gpus=2, limit=2500))
    assert over.effective_bands["/alice/next/0"] is Band.BATCH
    assert under.effective_bands["/alice/next/0"] is Band.INTERACTIVE


def test_spend_is_not_updated_within_a_tick():
    """alice is under budget at tick start, so all four of her tasks placed this tick keep
    INTERACTIVE even though together they take her far over."""
    workers = [worker("gpu-0", cpu=64, mem=512, gpu=8, variant="h100")]
    jobs = [job("/alice/sweep", replicas=4, cpu=0, mem=0, gpu=1, variant="h100")]
    decision = decide(cluster(workers, jobs, budgets=[budget("alice", 1500)]))
    assert len(decision.assignments) == 4
    assert {a.band for a in decision.assignments} == {Band.INTERACTIVE}


def test_the_downgrade_is_explained_on_pending_tasks():
    snapshot = gpu_user_snapshot(running_gpus=8, limit=2500)  # the host is full: /alice/next waits
    decision = decide(snapshot)
    reason = decision.pending_reasons["/alice/next/0"]
    assert reason.downgrade is not None
    assert "INTERACTIVE runs as BATCH: spend 8,000 > limit 2,500" in reason.text()


def test_running_tasks_keep_their_stamped_band_when_the_user_goes_over_budget():
    """bob is far over budget, but his running INTERACTIVE-stamped task is not a BATCH victim:
    carol's INTERACTIVE task cannot preempt it (equal bands never preempt)."""
    workers = [worker("gpu-0", cpu=8, mem=64, gpu=1, variant="h100")]
    jobs = [
        job("/bob/train", cpu=1, mem=1, gpu=1, variant="h100"),
        job("/carol/eval", cpu=1, mem=1, gpu=1, variant="h100"),
    ]
    tasks = [running("/bob/train/0", "gpu-0", band="interactive")]
    decision = decide(cluster(workers, jobs, tasks, budgets=[budget("bob", 10)]))
    assert decision.spend["bob"] > 10
    assert decision.preemptions == ()
    assert placed(decision) == {}
