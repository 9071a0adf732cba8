"""The tick's publication, built from what it keeps between ticks, equals a full rebuild after
every tick.

The same random ticks as the counts' test (``test_live_counts.simulated_ticks``: arrivals,
ends, cancels, preemptions and requeues by the real core, budget flips that reorder a band's
round robin, workers going unhealthy and healing, changes the tick drops). Each tick the
publication is built as the tick process builds it: the fairness sample's running values from
the counts of live work kept from tick to tick and updated from the change log
(``LiveCounts.left_running``), the what-if basis's worker columns kept while the workers are
the same (``board.formats.worker_statics``), its holder columns re-encoded only for the workers
whose holders changed (``board.formats.holder_columns``), the explanation in its columnar form. What readers
get of it (``parse_queue_index``, ``parse_basis``, the fairness sample as stored) must equal
a full rebuild: the sample computed over every task, the basis with nothing kept, and the
queue task by task from the decision.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.board import formats, publish
from scheduler.board.counts import LiveCounts, active_counts
from scheduler.board.formats import explanation_to_json, whatif_basis_to_json
from scheduler.board.queue import parse_queue_index
from scheduler.board.whatif import parse_basis
from scheduler.core.bands import Band
from scheduler.core.explain import pending_queue, queued_job_counts, queued_jobs, reason_record
from scheduler.core.fairness import fairness_sample, left_running
from scheduler.core.types import ANY_VARIANT, DeviceType, TaskState
from scheduler.models import compress_json, decompress_json
from tests.board.test_live_counts import set_changes, set_kept, simulated_ticks, tick

AT = datetime(2026, 1, 1, tzinfo=UTC)
PENDING = TaskState.PENDING


def holders_of(data: dict) -> tuple[dict, dict]:
    """A stored basis's holders by name (the interning order is the builder's business)."""
    rows, users, kinds = data["holders"], data["users"], data["kinds"]
    by_worker = {}
    for at in range(0, len(rows), 5):
        i, u, band, k, n = rows[at : at + 5]
        key = (data["workers"][i][0], users[u], band, tuple(kinds[k]))
        by_worker[key] = by_worker.get(key, 0) + n
    healthy = {(users[u], band, tuple(kinds[k])): n for u, band, k, n in data["holders_healthy"]}
    return by_worker, healthy


def expected_holders(workers: tuple, per_worker: dict) -> tuple[dict, dict]:
    """``holders_of`` a basis should give for ``active_counts``' ``per_worker``, worked out
    here without the builder: a device variant asked as "any" is its worker's."""
    by_name = {w.id: w for w in workers}
    by_worker: dict = {}
    healthy: dict = {}
    for name, held in per_worker.items():
        worker = by_name.get(name)
        if worker is None:
            continue
        for (user, band, dtype, variant, gang), n in held.items():
            if dtype != DeviceType.CPU.value and (not variant or variant == ANY_VARIANT):
                variant = worker.device.variant or ""
            key = (user, band, (dtype, variant, gang))
            by_worker[(name, *key)] = by_worker.get((name, *key), 0) + n
            if worker.healthy:
                healthy[key] = healthy.get(key, 0) + n
    return by_worker, healthy


def without_holders(data: dict) -> dict:
    return {key: value for key, value in data.items() if key not in ("holders", "users", "kinds", "holders_healthy")}


# The holder columns' two ways: every changed worker re-encoded alone (however many changed),
# and every worker encoded afresh once any changed.
@pytest.mark.parametrize("reencode_all_share", [1.0, 0.0])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ticks=st.lists(tick, min_size=1, max_size=12))
def test_the_publication_kept_from_tick_to_tick_equals_a_full_rebuild_after_every_tick(
    reencode_all_share, ticks, monkeypatch
):
    monkeypatch.setattr(formats, "REENCODE_ALL_SHARE", reencode_all_share)
    counts = LiveCounts()
    formats.forget()
    publish.forget()
    for simulated in simulated_ticks(ticks):
        snapshot, decision, kept = simulated.snapshot, simulated.decision, simulated.kept
        # The counts at the tick's start: the previous tick's, with the change log set.
        set_changes(counts, simulated, one_by_one=False)
        # The core's pending count, which the tick takes from them.
        assert sum(c[0] for c in counts.by_user.values()) == sum(1 for t in snapshot.tasks if t.state is PENDING)
        queue = pending_queue(decision)
        jobs_in_queue = queued_jobs(queue)
        job_counts = queued_job_counts(jobs_in_queue)
        # The tick's job column, the ids split once per process: the same.
        assert publish.jobs_in(queue) == jobs_in_queue

        # Fairness: running values from the kept counts, the rest from the queue's columns.
        running = counts.left_running(decision)
        assert running == left_running(snapshot, decision)
        sample = fairness_sample(
            snapshot, decision, queue, jobs_in_queue=jobs_in_queue, job_counts=job_counts, running=running
        )
        assert sample == fairness_sample(snapshot, decision)

        # The counts after the tick's kept changes, as the tick publishes them.
        set_kept(counts, simulated, one_by_one=False)
        explanation = explanation_to_json(snapshot, decision, queue, jobs_in_queue=jobs_in_queue, job_counts=job_counts)
        explanation["active"], holders = counts.published()
        basis = decompress_json(compress_json(whatif_basis_to_json(snapshot, decision, job_counts, holders)))

        # The basis rebuilt with nothing kept: the workers' and holders' columns afresh, the
        # holders counted; then what the tick process keeps is put back for the next tick.
        kept_columns = formats._statics, formats._holder_codes
        formats.forget()
        full_holders: dict = {}
        full_active = active_counts(snapshot, decision, kept, per_worker=full_holders)
        rebuilt = decompress_json(compress_json(whatif_basis_to_json(snapshot, decision, job_counts, full_holders)))
        formats._statics, formats._holder_codes = kept_columns
        assert without_holders(basis) == without_holders(rebuilt)
        assert holders_of(basis) == holders_of(rebuilt) == expected_holders(snapshot.workers, full_holders)
        assert explanation["active"] == full_active
        parsed = parse_basis(1, AT, decision.spend, basis)
        assert [w.id for w in parsed.workers] == [w.id for w in snapshot.workers]
        assert [w.healthy for w in parsed.workers] == [w.healthy for w in snapshot.workers]

        # The queue as readers index it, task by task from the decision.
        index = parse_queue_index(1, snapshot.now_ms, AT, {}, {}, decompress_json(compress_json(explanation)))
        assert index.ids == {int(band): task_ids for band, task_ids in queue.items()}
        for band, task_ids in queue.items():
            rank = int(band)
            for offset, task_id in enumerate(task_ids):
                entry = index.entry(rank, offset)
                job = snapshot.jobs[task_id[: task_id.rfind("/")]]
                assert (entry.task, entry.position, entry.band_count) == (task_id, offset + 1, len(task_ids))
                assert entry.reason == reason_record(decision.pending_reasons[task_id])
                assert (entry.user, entry.requested) == (job.user, job.band)
        assert job_counts == {
            int(band): {job_id: jobs.count(job_id) for job_id in dict.fromkeys(jobs)}
            for band, jobs in jobs_in_queue.items()
        }


def test_the_basis_reads_each_worker_s_free_capacity_by_name_whatever_the_decision_s_worker_order():
    ticks = [([("arrive", "alice", Band.BATCH, 3, 1, 1), ("arrive", "bob", Band.BATCH, 2, 0, 1)], 0xFFFF, False)]
    simulated = next(simulated_ticks(ticks))
    snapshot, decision = simulated.snapshot, simulated.decision
    left = decision.capacity_left
    # The decision's workers listed in reverse order, the first left out: matched by name.
    order = range(len(left.workers) - 1, 0, -1)
    columns = ("workers", "cpu", "mem", "gpu", "tpu", "building")
    shuffled = replace(left, **{name: tuple(getattr(left, name)[i] for i in order) for name in columns})
    basis = whatif_basis_to_json(snapshot, decision, {}, {})
    moved = whatif_basis_to_json(snapshot, replace(decision, capacity_left=shuffled), {}, {})
    for row, shuffled_row in zip(basis["workers"], moved["workers"], strict=True):
        if row[0] == left.workers[0]:
            assert shuffled_row == [*row[:8], 0, 0, 0, 0]  # not in the decision: nothing free
        else:
            assert shuffled_row == row
    assert any(row[8:] != [0, 0, 0, 0] for row in basis["workers"])


def test_the_running_values_kept_from_tick_to_tick_lose_exactly_what_the_decision_evicts():
    # Alice's five BATCH tasks (a core and a GiB each, in two jobs) fill the workers and run,
    # then Bob's PRODUCTION task evicts one of them: her running value in BATCH drops by that
    # task's, not to nothing.
    alice = ("arrive", "alice", Band.BATCH)
    ticks = [
        ([(*alice, 3, 0, 1, 1), (*alice, 2, 0, 1, 1)], 0xFFFF, False),
        ([("arrive", "bob", Band.PRODUCTION, 1, 0, 1, 1)], 0xFFFF, True),
    ]
    counts = LiveCounts()
    evicted = 0
    for simulated in simulated_ticks(ticks):
        snapshot, decision = simulated.snapshot, simulated.decision
        set_changes(counts, simulated, one_by_one=False)
        running = counts.left_running(decision)
        assert running == left_running(snapshot, decision)
        assert fairness_sample(snapshot, decision, running=running) == fairness_sample(snapshot, decision)
        evicted += len(decision.preemptions)
        set_kept(counts, simulated, one_by_one=False)
    assert evicted == 1
    value = 5 + 1  # one core and one GiB (``core.budget.resource_value``)
    assert running[(int(Band.BATCH), "alice")] == (4, 4 * value)


def test_forgetting_the_publication_drops_the_basis_s_kept_worker_and_holder_columns():
    ticks = [([("arrive", "alice", Band.BATCH, 3, 1, 1)], 0xFFFF, False)]
    counts = LiveCounts()
    simulated = next(simulated_ticks(ticks))
    set_changes(counts, simulated, one_by_one=False)
    set_kept(counts, simulated, one_by_one=False)
    _, holders = counts.published()
    assert holders
    whatif_basis_to_json(simulated.snapshot, simulated.decision, {}, holders)
    assert formats._statics is not None and formats._holder_codes is not None
    publish.forget()
    assert formats._statics is None and formats._holder_codes is None


def test_a_full_re_encode_of_the_holder_columns_forgets_users_no_worker_holds_any_more():
    from tests.core.builders import worker

    formats.forget()
    statics = formats.worker_statics(tuple(worker(f"w{i}", cpu=4, mem=8) for i in range(4)))
    cpu = DeviceType.CPU.value

    def held(users):
        return {f"w{i}": {(user, 2, cpu, "", False): 1} for i, user in enumerate(users)}

    users, *_ = formats.holder_columns(statics, held(["ann", "ann", "bob", "bob"]))
    assert sorted(users) == ["ann", "bob"]
    # One worker of four changes (below REENCODE_ALL_SHARE): the kept columns are added to.
    users, *_ = formats.holder_columns(statics, held(["ann", "ann", "bob", "cid"]))
    assert sorted(users) == ["ann", "bob", "cid"]
    # Three of four change: everything is encoded afresh, and ann, who holds nothing now, is gone.
    users, _, rows, _ = formats.holder_columns(statics, held(["bob", "dee", "dee", "cid"]))
    assert sorted(users) == ["bob", "cid", "dee"]
    assert len(rows) == 4 * 5
    formats.forget()


def test_the_job_column_s_kept_split_ids_are_rebuilt_from_the_queue_once_past_twice_its_size():
    publish.forget()
    old = {Band.BATCH: [f"old-{i}/0" for i in range(3000)]}
    assert publish.jobs_in(old) == queued_jobs(old)
    assert len(publish._job_of) == 3000
    queue = {Band.INTERACTIVE: ["a/0", "a/1", "b/0"], Band.BATCH: ["old-7/0", "c/2"]}
    assert (
        publish.jobs_in(queue) == queued_jobs(queue) == {Band.INTERACTIVE: ["a", "a", "b"], Band.BATCH: ["old-7", "c"]}
    )
    assert publish._job_of == {"a/0": "a", "a/1": "a", "b/0": "b", "old-7/0": "old-7", "c/2": "c"}
    publish.forget()
    assert publish._job_of == {}
