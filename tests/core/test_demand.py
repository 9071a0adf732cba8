"""Unmet TPU demand and the provisioner's plan, as pure functions."""

from __future__ import annotations

from scheduler.core.demand import (
    FailureHistory,
    GroupSpec,
    PendingTpuJob,
    SliceView,
    backoff_until,
    plan_group,
    plan_provisioning,
    slices_needed,
)

NOW = 1_800_000_000_000
GROUP = GroupSpec("v5p", "v5p-8", "us-central2-b", min_slices=0, max_slices=4, hosts_per_slice=4, chips_per_host=4)
LIMITS = {"idle_timeout_seconds": 600, "backoff_seconds": 60, "max_backoff_seconds": 600}


def gang(n: int, name="/a/g") -> PendingTpuJob:
    return PendingTpuJob(name, "v5p-8", 4, n, True)


def solo(n: int, chips=4, name="/a/s") -> PendingTpuJob:
    return PendingTpuJob(name, "v5p-8", chips, n, False)


def test_a_gang_needs_whole_slices():
    assert slices_needed(GROUP, [gang(4)], 0, 0) == 1
    assert slices_needed(GROUP, [gang(6)], 0, 0) == 2
    assert slices_needed(GROUP, [gang(4), gang(4, "/b/g")], 1, 0) == 1


def test_solo_tasks_share_hosts_by_chips_and_use_loose_hosts_first():
    assert slices_needed(GROUP, [solo(8, chips=1)], 0, 0) == 1  # 4 per host: 2 hosts
    assert slices_needed(GROUP, [solo(5)], 0, 0) == 2  # one host each: 5 hosts
    assert slices_needed(GROUP, [solo(5)], 0, 3) == 1  # 3 idle hosts of busy slices
    assert slices_needed(GROUP, [solo(3)], 1, 0) == 0  # a free slice takes them


def test_creating_slices_count_as_supply_and_max_caps_the_group():
    slices = [SliceView("s1", "v5p", "creating"), SliceView("s2", "v5p", "ready", busy=True)]
    plan = plan_group(
        GROUP, [gang(4), gang(4, "/b"), gang(4, "/c"), gang(4, "/d")], slices, FailureHistory(), NOW, **LIMITS
    )
    assert (plan.demand_slices, plan.create, plan.reason) == (3, 2, "at max_slices (4)")


def test_min_slices_are_created_without_demand():
    group = GroupSpec("v5p", "v5p-8", "z", min_slices=2, max_slices=4)
    assert plan_group(group, [], [], FailureHistory(), NOW, **LIMITS).create == 2


def test_failures_back_off_doubling_up_to_the_cap():
    assert backoff_until(FailureHistory(), 60, 600) is None
    assert backoff_until(FailureHistory(1, NOW), 60, 600) == NOW + 60_000
    assert backoff_until(FailureHistory(3, NOW), 60, 600) == NOW + 240_000
    assert backoff_until(FailureHistory(9, NOW), 60, 600) == NOW + 600_000
    waiting = plan_group(GROUP, [gang(4)], [], FailureHistory(2, NOW - 60_000), NOW, **LIMITS)
    assert (waiting.create, waiting.backoff_until_ms) == (0, NOW + 60_000)
    after = plan_group(GROUP, [gang(4)], [], FailureHistory(2, NOW - 120_000), NOW, **LIMITS)
    assert after.create == 1


def test_idle_slices_past_the_timeout_are_released_oldest_first_down_to_min():
    group = GroupSpec("v5p", "v5p-8", "z", min_slices=1, max_slices=4)
    slices = [
        SliceView("old", "v5p", "ready", idle_since_ms=NOW - 900_000),
        SliceView("older", "v5p", "ready", idle_since_ms=NOW - 1_000_000),
        SliceView("fresh", "v5p", "ready", idle_since_ms=NOW - 60_000),
        SliceView("busy", "v5p", "ready", busy=True),
    ]
    plan = plan_group(group, [], slices, FailureHistory(), NOW, **LIMITS)
    assert plan.release == ("older", "old")


def test_nothing_is_released_while_work_waits_and_draining_slices_are_taken_back():
    slices = [SliceView("idle", "v5p", "ready", idle_since_ms=NOW - 900_000), SliceView("draining", "v5p", "draining")]
    plan = plan_group(GROUP, [gang(4), gang(4, "/b")], slices, FailureHistory(), NOW, **LIMITS)
    assert plan.release == ()
    assert plan.reclaim == ("draining",)
    assert (plan.demand_slices, plan.create) == (0, 0)


def test_jobs_go_to_the_first_group_matching_variant_and_zone():
    groups = [GroupSpec("east", "v5p-8", "us-east5-a"), GroupSpec("central", "v5p-8", "us-central2-b")]
    jobs = [
        PendingTpuJob("/a/x", "v5p-8", 4, 1, False, frozenset({"us-central2-b"})),
        PendingTpuJob("/a/y", "v6e-8", 4, 1, False),
    ]
    plan = plan_provisioning(groups, jobs, [], {}, NOW, **LIMITS)
    assert (plan.groups["east"].create, plan.groups["central"].create) == (0, 1)
    assert plan.unserved == ("/a/y",)
