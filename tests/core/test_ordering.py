"""Gates and scheduling order (reference §3.3, §3.5)."""

import random

import pytest

from scheduler.core.bands import Band
from scheduler.core.decision import _group_tasks, decide
from scheduler.core.ordering import gated_queue, interleave_by_user, job_sort_key, scheduling_order, sort_jobs
from scheduler.core.types import JobState, TaskState
from tests.core.builders import NOW, budget, cluster, job, placed, reason_text, running, task, worker

BIG = [worker("w0", cpu=1000, mem=4000)]


def order_of(*jobs, **kwargs):
    return list(decide(cluster(BIG, jobs, **kwargs)).order)


def test_lower_rank_bands_come_first():
    assert order_of(
        job("/a/batch", band="batch"),
        job("/a/inter", band="interactive"),
        job("/a/prod", band="production"),
        job("/a/sys", band="system"),
    ) == ["/a/sys/0", "/a/prod/0", "/a/inter/0", "/a/batch/0"]


def test_deeper_jobs_come_first_then_older_root_then_older_submission():
    assert order_of(
        job("/a/new", submitted=30),
        job("/a/old", submitted=10),
        job("/a/old/child", submitted=40, root_submitted=10),
        job("/a/mid", submitted=20),
    ) == ["/a/old/child/0", "/a/old/0", "/a/mid/0", "/a/new/0"]


def test_a_child_of_an_old_tree_beats_a_new_root():
    assert (
        order_of(
            job("/a/fresh", submitted=100),
            job("/a/ancient/child", submitted=200, root_submitted=1),
        )[0]
        == "/a/ancient/child/0"
    )


def test_equal_submission_times_break_ties_by_job_id_then_task_index():
    assert order_of(job("/a/b", replicas=2), job("/a/a", replicas=2)) == ["/a/a/0", "/a/a/1", "/a/b/0", "/a/b/1"]


def test_a_job_expires_at_its_deadline_and_becomes_unschedulable():
    decision = decide(cluster(BIG, [job("/a/late", replicas=2, deadline=NOW), job("/a/fine", deadline=NOW + 1)]))
    assert [u.task for u in decision.unschedulable] == ["/a/late/0", "/a/late/1"]
    assert "deadline" in decision.unschedulable[0].reason
    assert "2027-01-15T08:00:00Z" in decision.unschedulable[0].reason
    assert decision.jobs_after == {"/a/late": JobState.UNSCHEDULABLE}
    assert decision.after["/a/late/0"].state is TaskState.UNSCHEDULABLE
    assert decision.order == ("/a/fine/0",)
    assert "/a/late/0" in decision.effective_bands


def test_an_expired_jobs_running_tasks_are_killed_with_it():
    snapshot = cluster(BIG, [job("/a/late", replicas=2, deadline=NOW - 1)], [running("/a/late/0", "w0")])
    decision = decide(snapshot)
    assert decision.after["/a/late/1"].state is TaskState.UNSCHEDULABLE
    assert decision.after["/a/late/0"].state is TaskState.KILLED


@pytest.mark.parametrize("cap, passed", [(4, 4), (2, 2), (0, 10)])
def test_per_job_cap_limits_tasks_of_one_job_per_tick(cap, passed):
    decision = decide(cluster(BIG, [job("/a/array", replicas=10)], max_tasks_per_job_per_cycle=cap))
    assert decision.order == tuple(f"/a/array/{i}" for i in range(passed))
    held = [t for t in decision.pending_reasons if t not in decision.order]
    assert len(held) == 10 - passed
    for task_id in held:
        assert decision.pending_reasons[task_id].code == "per_job_cap"


def test_gangs_are_exempt_from_the_per_job_cap():
    decision = decide(cluster(BIG, [job("/a/gang", replicas=6, group_by="rack")], max_tasks_per_job_per_cycle=4))
    assert len(decision.order) == 6


def test_the_per_job_cap_counts_per_job_not_per_user():
    decision = decide(cluster(BIG, [job("/a/x", replicas=5), job("/a/y", replicas=5)], max_tasks_per_job_per_cycle=4))
    assert len(decision.order) == 8


def test_interleave_by_user_goes_round_robin_with_lower_spend_first():
    items = [("alice", 1), ("alice", 2), ("alice", 3), ("bob", 1), ("carol", 1), ("carol", 2)]
    spend = {"alice": 50, "bob": 100}  # carol has no spend: 0
    assert interleave_by_user(items, lambda i: i[0], spend) == [
        ("carol", 1),
        ("alice", 1),
        ("bob", 1),
        ("carol", 2),
        ("alice", 2),
        ("alice", 3),
    ]


def test_interleave_by_user_breaks_spend_ties_by_first_appearance():
    items = ["b1", "a1", "b2", "a2"]
    assert interleave_by_user(items, lambda i: i[0], {}) == ["b1", "a1", "b2", "a2"]


def test_interleave_by_user_keeps_one_users_order():
    items = [("alice", i) for i in range(5)]
    assert interleave_by_user(items, lambda i: i[0], {"alice": 7}) == items


def test_order_interleaves_users_within_a_band_by_spend():
    workers = [worker("w0", cpu=1000, mem=4000), worker("busy", cpu=100, mem=100)]
    jobs = [
        job("/alice/a", replicas=3, submitted=1),
        job("/bob/b", replicas=3, submitted=2),
        job("/alice/run", cpu=10, mem=0),
    ]
    # alice spends 50 points: bob (0) goes first in every round.
    decision = decide(cluster(workers, jobs, [running("/alice/run/0", "busy")]))
    assert decision.order[:6] == ("/bob/b/0", "/alice/a/0", "/bob/b/1", "/alice/a/1", "/bob/b/2", "/alice/a/2")


def test_interleaving_never_crosses_bands():
    jobs = [
        job("/alice/prod", band="production", replicas=2),
        job("/bob/inter", band="interactive", replicas=2),
        job("/carol/prod", band="production", replicas=1),
    ]
    decision = decide(cluster(BIG, jobs))
    bands = [decision.effective_bands[t] for t in decision.order]
    assert bands == sorted(bands)
    assert decision.order[-2:] == ("/bob/inter/0", "/bob/inter/1")


def test_order_groups_by_effective_band_and_keeps_a_users_own_order():
    """alice is over budget, so her INTERACTIVE job is scheduled in the BATCH band next to bob's
    BATCH job; bob (no spend) leads the round robin and alice's tasks keep their own order."""
    workers = [worker("w0", cpu=1000, mem=4000), worker("busy", cpu=100, mem=100)]
    jobs = [
        job("/bob/batch", band="batch", submitted=1),
        job("/alice/inter", band="interactive", replicas=2, submitted=5),
        job("/alice/run", cpu=10, mem=0),
    ]
    decision = decide(cluster(workers, jobs, [running("/alice/run/0", "busy")], budgets=[budget("alice", 10)]))
    assert decision.effective_bands["/alice/inter/0"] is Band.BATCH
    assert decision.order == ("/bob/batch/0", "/alice/inter/0", "/alice/inter/1")


def test_only_gated_tasks_are_placed():
    decision = decide(cluster(BIG, [job("/a/array", replicas=6)]))
    assert sorted(placed(decision)) == [f"/a/array/{i}" for i in range(4)]
    assert "per-job limit" in reason_text(decision, "/a/array/5")


def test_sort_jobs_matches_the_sort_key():
    rng = random.Random(4)
    jobs = [
        job(
            f"/u{rng.randint(0, 3)}/j{i}" + ("/c" if rng.random() < 0.3 else ""),
            band=rng.choice(list(Band)),
            submitted=rng.randint(0, 5),
            root_submitted=rng.randint(0, 5),
        )
        for i in range(300)
    ]
    expected = sorted(jobs, key=job_sort_key)
    sort_jobs(jobs)
    assert jobs == expected


@pytest.mark.parametrize(
    ("spec", "cap", "passed", "held", "expired"),
    [
        (job("/a/j", replicas=6), 4, 4, 2, False),
        (job("/a/j", replicas=4), 4, 4, 0, False),
        (job("/a/j", replicas=6), 0, 6, 0, False),  # 0: unlimited
        (job("/a/g", replicas=6, group_by="tpu-name"), 4, 6, 0, False),  # gangs are exempt
        (job("/a/j", replicas=6, deadline=NOW), 4, 0, 0, True),  # expires at the deadline itself
        (job("/a/j", replicas=6, deadline=NOW + 1), 4, 4, 2, False),
    ],
)
def test_gated_queue_splits_passed_and_held_or_expires(spec, cap, passed, held, expired):
    tasks = [task(f"{spec.id}/{i}", state="pending") for i in range(spec.replicas)]
    queue = gated_queue(spec, spec.band, tasks, NOW, cap)
    assert (len(queue.passed), len(queue.held), queue.expired) == (passed, held, expired)
    assert list(queue.passed) + list(queue.held) == ([] if expired else tasks)
    assert queue.pending == tasks and queue.gang == (spec.group_by is not None)


def test_interleave_by_user_of_nothing_is_nothing():
    assert interleave_by_user([], lambda i: i[0], {"alice": 1}) == []


def test_interleave_by_user_goes_on_with_the_users_left_after_short_buckets_end():
    items = [("a", 1), ("b", 1), ("b", 2), ("b", 3), ("c", 1), ("c", 2)]
    assert interleave_by_user(items, lambda i: i[0], {}) == [
        ("a", 1),
        ("b", 1),
        ("c", 1),
        ("b", 2),
        ("c", 2),
        ("b", 3),
    ]


def test_group_tasks_finds_the_jobs_whose_pending_tasks_come_out_of_index_order():
    # /a/x goes back to an index below its last when it comes back after /a/y; /a/z is out of
    # order within its own run; /a/y comes back in order; running tasks do not count.
    tasks = [
        task("/a/x/0", "pending"),
        task("/a/x/2", "pending"),
        task("/a/y/0", "pending"),
        task("/a/x/1", "pending"),
        task("/a/y/1", "pending"),
        task("/a/z/1", "pending"),
        task("/a/z/0", "pending"),
        task("/a/w/3", "pending"),
        running("/a/w/0", "w1"),
        task("/a/w/4", "pending"),
    ]
    pending, active, _, out_of_order = _group_tasks(tasks)
    assert out_of_order == {"/a/x", "/a/z"}
    assert {job_id: [t.id for t in ts] for job_id, ts in pending.items()} == {
        "/a/x": ["/a/x/0", "/a/x/2", "/a/x/1"],
        "/a/y": ["/a/y/0", "/a/y/1"],
        "/a/z": ["/a/z/1", "/a/z/0"],
        "/a/w": ["/a/w/3", "/a/w/4"],
    }
    assert list(active) == ["/a/w"]


def test_group_tasks_gathers_each_jobs_active_tasks_wherever_they_are_listed():
    # /a/x's active tasks come in two runs with /a/y's and pending ones between: one bucket
    # each, in listing order, jobs in order of first appearance.
    tasks = [
        running("/a/x/0", "w1"),
        running("/a/x/1", "w1"),
        task("/a/x/2", "assigned", "w2"),
        running("/a/y/0", "w1"),
        task("/a/x/5", "pending"),
        task("/a/x/3", "building", "w2"),
        task("/a/y/1", "succeeded", "w2"),
        running("/a/y/2", "w2"),
        running("/a/x/4", "w3"),
    ]
    _, active, _, _ = _group_tasks(tasks)
    assert {job_id: [t.id for t in ts] for job_id, ts in active.items()} == {
        "/a/x": ["/a/x/0", "/a/x/1", "/a/x/2", "/a/x/3", "/a/x/4"],
        "/a/y": ["/a/y/0", "/a/y/2"],
    }
    assert list(active) == ["/a/x", "/a/y"]


@pytest.mark.parametrize("seed", range(20))
def test_scheduling_order_gives_each_bands_gangs_in_order_of_their_first_task(seed):
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(rng.randint(1, 5))]
    spend = {user: rng.randint(0, 3) for user in users if rng.random() < 0.8}
    queues = []
    for i in range(rng.randint(1, 40)):
        gang = rng.random() < 0.4
        spec = job(
            f"/{rng.choice(users)}/j{i}",
            band=rng.choice([Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH]),
            replicas=rng.randint(1, 4),
            group_by="tpu-name" if gang else None,
        )
        tasks = [task(f"{spec.id}/{k}", "pending") for k in range(spec.replicas)]
        queues.append(gated_queue(spec, spec.band, tasks, NOW, rng.choice([0, 1, 2])))
    bands, gangs = scheduling_order(queues, spend)
    for band, tasks in bands.items():
        firsts = {}
        for t in tasks:
            firsts.setdefault(t.job_id, t)
        expected = [job_id for job_id in firsts if any(q.spec.id == job_id and q.gang for q in queues)]
        assert [q.spec.id for q in gangs.get(band, [])] == expected
    assert set(gangs) <= set(bands)
