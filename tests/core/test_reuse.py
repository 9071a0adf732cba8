"""``core.reuse``: an earlier decision is taken again only when deciding afresh would give it."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decision import decide
from scheduler.core.reuse import remember, still_decided
from scheduler.core.types import GroupSpec
from scheduler.core.wire import decision_to_json
from tests.core.builders import NOW, budget, cluster, job, running, worker
from tests.core.test_properties import snapshots

DEADLINE = 1_800_000_000_000  # the deadline test_properties' snapshots give some jobs


def busy_cluster(**jobs_kwargs):
    return cluster(
        [worker("w1", 4, 16), worker("w2", 8, 32, gpu=2, variant="h100")],
        [
            job("/ann/run", cpu=2, mem=4, band="batch"),
            job("/bob/big", cpu=16, mem=4, **jobs_kwargs),  # never fits: stays pending
            job("/cy/gpu", gpu=4, variant="h100"),
        ],
        tasks=[running("/ann/run/0", "w1", band="batch")],
        budgets=[budget("bob", 10)],
    )


def test_an_unchanged_cluster_later_reuses_the_decision():
    snapshot = busy_cluster()
    previous = remember(snapshot, decide(snapshot))
    later = replace(snapshot, now_ms=snapshot.now_ms + 60_000)
    assert still_decided(previous, later)
    assert decision_to_json(previous.decision) == decision_to_json(decide(later))


def test_a_changed_task_worker_job_or_budget_decides_again():
    snapshot = busy_cluster()
    previous = remember(snapshot, decide(snapshot))
    changed = [
        replace(snapshot, tasks=snapshot.tasks[:1]),
        replace(snapshot, workers=snapshot.workers[:1]),
        replace(snapshot, jobs={k: v for k, v in snapshot.jobs.items() if k != "/cy/gpu"}),
        replace(snapshot, budgets={"bob": budget("bob", 11)}),
        replace(snapshot, config=replace(snapshot.config, max_assignments_per_worker=1)),
        # A scale group appearing changes what the explanations say a job waits for.
        replace(snapshot, scale_groups=(GroupSpec("v5p", "v5p-8", "us-east5-a"),)),
        # The same jobs in another order: the decision may follow the order.
        replace(snapshot, jobs=dict(reversed(list(snapshot.jobs.items())))),
    ]
    assert [still_decided(previous, s) for s in changed] == [False] * len(changed)
    assert not still_decided(None, snapshot)


def test_a_deadline_coming_decides_again():
    snapshot = busy_cluster(deadline=NOW + 30_000)
    previous = remember(snapshot, decide(snapshot))
    assert still_decided(previous, replace(snapshot, now_ms=NOW + 29_999))
    at_deadline = replace(snapshot, now_ms=NOW + 30_000)
    assert not still_decided(previous, at_deadline)
    assert decision_to_json(decide(at_deadline)) != decision_to_json(previous.decision)  # it expired


def test_after_a_deadline_passed_the_decision_is_never_reused():
    snapshot = busy_cluster(deadline=NOW - 1)
    previous = remember(snapshot, decide(snapshot))
    later = replace(snapshot, now_ms=NOW + 5_000)
    assert not still_decided(previous, later)
    # The expiry's reason says how late the job is, so the clock changed the decision.
    assert decision_to_json(decide(later)) != decision_to_json(previous.decision)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    snapshot=snapshots(),
    first=st.sampled_from([NOW, DEADLINE - 10, DEADLINE - 1, DEADLINE, DEADLINE + 1_000]),
    later=st.sampled_from([0, 1, 9, 10, 11, 5_000]),
)
def test_a_reused_decision_is_the_fresh_decision(snapshot, first, later):
    # Whatever the cluster and the clocks: when the previous decision is reused, deciding
    # afresh at the new clock gives the same decision.
    before = replace(snapshot, now_ms=first)
    previous = remember(before, decide(before))
    now = replace(snapshot, now_ms=first + later)
    if still_decided(previous, now):
        assert decision_to_json(previous.decision) == decision_to_json(decide(now))
    else:
        assert previous.first_deadline_ms is not None and max(first, first + later) >= previous.first_deadline_ms
