"""Fairness as the tick saw it (issue 15 §2): the sample the tick stores equals a reference
recomputed task by task from the same snapshot and decision, over generated clusters; and
hand-made cases for each number."""

from __future__ import annotations

from hypothesis import given, settings

from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.core.decision import decide
from scheduler.core.fairness import band_rows, fairness_sample
from scheduler.core.types import ACTIVE_STATES
from tests.core.builders import budget, cluster, job, running, worker
from tests.core.test_properties import CLUSTERS


def queued_band(decision, task_id: str) -> Band:
    band = decision.effective_bands.get(task_id)
    return band if band is not None else decision.requeue_bands[task_id]


def reference(snapshot, decision) -> dict:
    """Task by task: each task's state and band after the decision, then sums per band and user."""
    jobs = snapshot.jobs
    placed = {a.task: a for a in decision.assignments}
    out: dict[str, dict[str, list[int]]] = {}

    def row(band, user):
        return out.setdefault(band.wire, {}).setdefault(user, [0, 0, 0, 0])

    for task in snapshot.tasks:
        spec = jobs[task.job_id]
        after = decision.after.get(task.id)
        if task.id in placed:
            r = row(placed[task.id].band, spec.user)
            r[0] += resource_value(spec.resources)
            r[3] = 1
        elif task.state in ACTIVE_STATES and (after is None or after.state in ACTIVE_STATES):
            row(task.band, spec.user)[0] += resource_value(spec.resources)
        if task.id in decision.pending_reasons and task.id not in placed:
            band = queued_band(decision, task.id)
            row(band, spec.user)[1] += 1
    for users in out.values():
        for user, r in users.items():
            limit = (
                snapshot.budgets[user].budget_limit
                if user in snapshot.budgets
                else snapshot.config.budget_defaults.budget_limit
            )
            r[2] = int(limit > 0 and decision.spend.get(user, 0) > limit)
    return out


@settings(max_examples=80, deadline=None)
@given(CLUSTERS)
def test_the_sample_is_what_the_tick_decided(snapshot):
    decision = decide(snapshot)
    sample = fairness_sample(snapshot, decision)
    expected = reference(snapshot, decision)
    assert {b: data["users"] for b, data in sample["bands"].items()} == expected
    for band, data in sample["bands"].items():
        assert data["running_value"] == sum(r[0] for r in expected[band].values())
        rows = band_rows(data)
        if data["running_value"]:
            assert abs(sum(r["share"] for r in rows) - 1) < 1e-9
        assert all(r["equal_share"] == 1 / len(rows) for r in rows)
        waiting = data["smallest_waiting"]
        pending_jobs = {
            t.rsplit("/", 1)[0]
            for t in decision.pending_reasons
            if t not in {a.task for a in decision.assignments} and queued_band(decision, t) == Band.parse(band)
        }
        if pending_jobs:
            smallest = min(resource_value(snapshot.jobs[j].resources) for j in pending_jobs)
            assert waiting["value"] == smallest and waiting["job"] in pending_jobs
        else:
            assert waiting is None


def test_shares_turns_budget_and_the_smallest_waiting_job_by_hand():
    workers = [worker("w1", cpu=8, mem=32), worker("w2", cpu=8, mem=32)]
    jobs = [
        job("/alice/run", cpu=8, mem=8),  # running on w1
        job("/bob/new", cpu=8, mem=8, submitted=1),  # placed on w2 this tick
        job("/carol/big", cpu=8, mem=8, submitted=2),  # waits: no room left
        job("/carol/small", cpu=2, mem=2, submitted=3),  # waits too, and is the smallest
    ]
    snapshot = cluster(
        workers, jobs, [running("/alice/run/0", "w1", band="interactive")], budgets=[budget("alice", 10)]
    )
    decision = decide(snapshot)
    band = fairness_sample(snapshot, decision)["bands"]["interactive"]
    value = resource_value(snapshot.jobs["/alice/run"].resources)
    assert band["users"] == {"alice": [value, 0, 1, 0], "bob": [value, 0, 0, 1], "carol": [0, 2, 0, 0]}
    rows = {r["user"]: r for r in band_rows(band)}
    assert rows["alice"]["share"] == 0.5 and rows["carol"]["share"] == 0 and rows["carol"]["equal_share"] == 1 / 3
    waiting = band["smallest_waiting"]
    assert (waiting["job"], waiting["user"], waiting["pending"]) == ("/carol/small", "carol", 1)
    assert waiting["reason"]["code"] == decision.pending_reasons["/carol/small/0"].code


def test_an_evicted_task_no_longer_counts_as_running_in_its_band():
    workers = [worker("w1", cpu=8, mem=32)]
    jobs = [
        job("/bob/low", band="batch", cpu=8, mem=8),
        job("/alice/prod", band="production", cpu=8, mem=8, submitted=1),
    ]
    snapshot = cluster(workers, jobs, [running("/bob/low/0", "w1", band="batch")])
    decision = decide(snapshot)
    assert [p.victim for p in decision.preemptions] == ["/bob/low/0"]
    bands = fairness_sample(snapshot, decision)["bands"]
    assert bands["batch"]["users"]["bob"][:2] == [0, 1]  # back in the queue, running nothing
    assert bands["production"]["users"]["alice"][3] == 1


def test_a_user_running_work_worth_nothing_still_has_demand_in_its_band():
    workers = [worker("w1", cpu=8, mem=32)]
    jobs = [job("/alice/tiny", cpu=0.5, mem=0), job("/bob/run", cpu=2, mem=2, submitted=1)]
    snapshot = cluster(
        workers,
        jobs,
        [running("/alice/tiny/0", "w1", band="interactive"), running("/bob/run/0", "w1", band="interactive")],
    )
    decision = decide(snapshot)
    assert resource_value(snapshot.jobs["/alice/tiny"].resources) == 0
    users = fairness_sample(snapshot, decision)["bands"]["interactive"]["users"]
    assert users["alice"] == [0, 0, 0, 0]  # counted in the equal share: 1 / 2
    assert len(band_rows(fairness_sample(snapshot, decision)["bands"]["interactive"])) == 2
