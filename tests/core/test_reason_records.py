"""Reasons as stored data (issue 12): every cause becomes a record with a code and its numbers,
and the text rendered from the record is the text of the cause itself; positions have one
definition (``pending_queue``)."""

from dataclasses import replace

import pytest
from hypothesis import given

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.explain import (
    AssignmentCapReached,
    BuildSlotsFull,
    Downgrade,
    GangGroupTooSmall,
    GangNoRoom,
    InsufficientResource,
    JobExhausted,
    NeverFits,
    NoHealthyWorkers,
    NoMatchingWorker,
    PendingReason,
    PerJobCap,
    Preempted,
    Requeued,
    RoomFreedThisTick,
    WaitingBehind,
    WaitingForSlice,
    cause_text,
    downgrade_text,
    pending_queue,
    pending_text,
    reason_record,
)
from scheduler.core.kueue import KueueWait
from scheduler.core.types import Decision, TaskState
from tests.core.builders import GIB, cluster, job, running, worker
from tests.core.test_properties import CLUSTERS, PROPERTY

CPU = InsufficientResource("cpu", need=16000, best_free=0, workers=4, matching=4)
EVERY_CAUSE = [
    NoHealthyWorkers(),
    NoMatchingWorker(("device-type=gpu", "zone in (a, b)")),
    CPU,
    InsufficientResource("memory", need=64 * GIB, best_free=12 * GIB, workers=3, matching=5),
    InsufficientResource("gpu", need=8, best_free=4, workers=2, matching=2),
    InsufficientResource("tpu", need=4, best_free=0, workers=1, matching=1),
    BuildSlotsFull(workers=2, matching=3, limit=8),
    AssignmentCapReached(workers=1, matching=1, limit=32),
    GangGroupTooSmall(4, "tpu-name", 2),
    GangNoRoom(4, "tpu-name", 3),
    RoomFreedThisTick(),
    PerJobCap(4),
    JobExhausted(CPU),
    WaitingBehind(7, CPU),
    Preempted("/bob/prod/0"),
    Requeued("/alice/gang/1"),
    WaitingForSlice("v5p-pool"),
    NeverFits((("cpu", "cpu", 64000, 0, 0),), (8000, 32 * GIB, 0)),
]


@pytest.mark.parametrize("cause", EVERY_CAUSE, ids=lambda c: c.code)
def test_every_cause_renders_the_same_text_from_its_stored_record(cause):
    record = reason_record(PendingReason(cause))
    assert record["code"] == cause.code
    assert cause_text(record) == cause.text()


@pytest.mark.parametrize("cause", EVERY_CAUSE, ids=lambda c: c.code)
def test_a_served_reason_renders_its_own_text_once(cause):
    """The API serves the record with its text, band and place beside the numbers; rendering
    that again (the console's job page does) gives the same text, not the place twice."""
    downgrade = Downgrade(Band.INTERACTIVE, Band.BATCH, 48, 30)
    record = reason_record(PendingReason(cause, downgrade))
    text = pending_text(record, Band.BATCH, 2, 5, 13)
    served = {**record, "text": text, "band": "batch", "position": 2, "band_pending": 5, "tick": 13}
    assert pending_text(served, Band.BATCH, 2, 5, 13) == text
    assert text.count("position 2 of 5") == 1


def test_a_record_carries_the_numbers_behind_the_text():
    record = reason_record(PendingReason(WaitingBehind(7, CPU), Downgrade(Band.INTERACTIVE, Band.BATCH, 48, 30)))
    assert record == {
        "code": "waiting_behind",
        "ahead": 7,
        "cause": {
            "code": "insufficient_cpu",
            "resource": "cpu",
            "need": 16000,
            "best_free": 0,
            "workers": 4,
            "matching": 4,
        },
        "downgrade": {"requested": "interactive", "effective": "batch", "spend": 48, "limit": 30},
    }
    assert downgrade_text(record) == "INTERACTIVE runs as BATCH: spend 48 > limit 30"


def test_kubernetes_waits_and_shell_codes_render_from_records():
    assert cause_text(reason_record(KueueWait("rate_cap", "3/min"))) == "Kubernetes promotion rate cap: 3/min"
    assert cause_text({"code": "not_yet_ticked"}) == "Waiting for the next scheduling tick"
    assert cause_text({"code": "something_new"}) == "No reason recorded"


def test_positions_count_only_what_the_tick_left_pending():
    # Three workers with room for 3 of big's 5 tasks: the first task left pending is position 1
    # of 2, not position 4 of 5 (the count before placement that the text used to carry).
    snapshot = cluster(
        workers=[worker(f"w{i}", cpu=10) for i in range(3)],
        jobs=[job("/ben/big", replicas=5, cpu=10)],
    )
    decision = decide(snapshot)
    queue = pending_queue(decision)
    assert queue == {Band.INTERACTIVE: ["/ben/big/3", "/ben/big/4"]}
    assert "position" not in decision.pending_reasons["/ben/big/3"].text()


def test_a_preemption_victim_queues_in_the_band_it_would_get_next():
    snapshot = cluster(
        workers=[worker("w0", cpu=10)],
        jobs=[job("/alice/low", band=Band.BATCH, cpu=10), job("/erin/prod", band=Band.PRODUCTION, cpu=10)],
        tasks=[running("/alice/low/0", "w0")],
    )
    decision = decide(snapshot)
    assert decision.requeue_bands == {"/alice/low/0": Band.BATCH}
    assert pending_queue(decision) == {Band.BATCH: ["/alice/low/0"]}


@PROPERTY
@given(CLUSTERS)
def test_the_queue_holds_every_pending_task_once_and_counts_sum_to_pending(snapshot):
    decision = decide(snapshot)
    queue = pending_queue(decision)
    queued = [t for tasks in queue.values() for t in tasks]
    assert len(queued) == len(set(queued)) == len(decision.pending_reasons)
    assert set(queued) == set(decision.pending_reasons)
    for band, tasks in queue.items():
        for position, task_id in enumerate(tasks, start=1):
            if task_id in decision.effective_bands:
                assert decision.effective_bands[task_id] == band
            text = pending_text(reason_record(decision.pending_reasons[task_id]), band, position, len(tasks), 1)
            assert f"position {position:,} of {len(tasks):,} in {band.name} as of tick 1" in text
    still = {t for t, a in decision.after.items() if a.state is TaskState.PENDING}
    assert still <= set(queued)


def test_docs_api_md_lists_every_reason_code():
    """docs/api.md's table is the reference clients read: every code a record can carry is in it."""
    from pathlib import Path

    from scheduler.core.explain.reasons import _CAUSE_TYPES
    from scheduler.core.explain.records import _INSUFFICIENT, SHELL_TEXT
    from scheduler.core.kueue import KUEUE_TEXT

    table = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    codes = set(_CAUSE_TYPES) | _INSUFFICIENT | set(SHELL_TEXT) | set(KUEUE_TEXT)
    assert {code for code in codes if f"`{code}`" not in table} == set()


def test_the_queue_keeps_each_bands_tasks_in_the_ticks_order_whatever_their_mix():
    # Bands interleaved in the tick's order, a band with one task, one absent: each band's list
    # is cut where its tasks end after the stable sort by band.
    bands = {"/a/j/0": Band.BATCH, "/a/j/1": Band.SYSTEM, "/b/k/0": Band.BATCH, "/b/k/1": Band.INTERACTIVE}
    bands.update({f"/c/m/{i}": Band.INTERACTIVE for i in range(5)})
    order = ("/c/m/3", "/a/j/0", "/c/m/0", "/b/k/1", "/a/j/1", "/b/k/0", "/c/m/4", "/c/m/1", "/c/m/2")
    decision = Decision(
        spend={},
        effective_bands=bands,
        order=order,
        assignments=(),
        preemptions=(),
        unschedulable=(),
        pending_reasons=dict.fromkeys(order, RoomFreedThisTick()),
        after={},
        jobs_after={},
    )
    queue = pending_queue(decision)
    assert list(queue) == [Band.SYSTEM, Band.INTERACTIVE, Band.BATCH]
    assert queue == {
        Band.SYSTEM: ["/a/j/1"],
        Band.INTERACTIVE: ["/c/m/3", "/c/m/0", "/b/k/1", "/c/m/4", "/c/m/1", "/c/m/2"],
        Band.BATCH: ["/a/j/0", "/b/k/0"],
    }
    assert pending_queue(replace(decision, order=(), pending_reasons={})) == {}
