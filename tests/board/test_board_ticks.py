"""On PostgreSQL the tick updates the board's counts from the rows' change log; after every
committed write of every kind, what the newest tick published equals a full count of a whole
read. (SQLite reads the cluster whole every tick, and so counts it whole.)"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.board import publish
from scheduler.board.counts import active_counts
from scheduler.core.decision import decide
from scheduler.models import TickRecord
from scheduler.store.cluster_rows import ClusterRows
from scheduler.tick.load import load_snapshot
from tests.personas import NOW_MS
from tests.store.test_cluster_rows import Operations, cluster

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def published_counts() -> dict:
    newest = TickRecord.objects.order_by("-pk").first()
    holder = newest if newest.explanation is not None else newest.explanation_tick
    return holder.explanation["active"]


def full_count() -> dict:
    """``active_counts`` over a whole read, in rows of its own (what a new process reads)."""
    rows = ClusterRows()
    rows.refresh()
    whole = rows.view()
    snapshot = replace(load_snapshot(NOW_MS).snapshot, workers=whole.workers, jobs=whole.jobs, tasks=whole.tasks)
    return active_counts(snapshot, decide(snapshot), ())


def test_counts_updated_from_the_change_log_equal_a_full_count_after_every_write(monkeypatch):
    # The fairness sample the tick stores, from the counts it keeps, equals one counted over
    # every task of the same snapshot and decision.
    real_fairness = publish.fairness_sample
    samples = []

    def checked_fairness(snapshot, decision, queue, **kept):
        sample = real_fairness(snapshot, decision, queue, **kept)
        assert sample == real_fairness(snapshot, decision)
        samples.append(kept.get("running") is not None)
        return sample

    monkeypatch.setattr(publish, "fairness_sample", checked_fairness)
    cluster()
    ops = Operations()
    plan = random.Random(11)
    weights = {
        "submit": 4,
        "tick": 5,
        "report": 3,
        "confirm_stopped": 1,
        "cancel": 1,
        "lose_worker": 1,
        "heal_workers": 1,
    }
    ops.submit(0)
    ops.tick(0)
    ways = []
    for n in range(1, 90):
        name = plan.choices(list(weights), weights=list(weights.values()))[0]
        getattr(ops, name)(plan.randrange(50))
        if name != "tick":
            continue
        if publish._live is not None:
            ways.append(publish._live.counted)
        assert published_counts() == full_count(), f"after step {n}"
    # The run went through the incremental path, not only rebuilds.
    assert ways.count("changes") >= 10, ways
    assert samples.count(True) >= 10, samples
