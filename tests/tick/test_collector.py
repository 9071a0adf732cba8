"""What a tick keeps is made old for the cyclic garbage collector at the tick's end, not scanned
young by the collection its first allocation after the pause starts (issue 23); nothing leaks:
a reference cycle left by a tick is collected by the next full collection, and the full
collection that the objects made old make due runs after the tick (``scheduler.tick.collector``).
"""

from __future__ import annotations

import gc
import weakref

import pytest

from scheduler import tasks
from scheduler.tick import collector, run
from scheduler.tick.run import acquire_lease, run_tick, run_tick_now
from tests.personas import NOW_MS, make_job, make_user, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    make_worker("w1")
    make_job("/alice/a")


class Node:
    """A tracked object that can refer to itself."""


def in_generation(obj, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


@pytest.fixture
def a_cycle_per_tick(monkeypatch):
    """Each tick's write phase leaves one unreachable reference cycle; its weak references."""
    made: list[weakref.ref] = []
    apply_decision = run.apply_decision

    def leaving_a_cycle(*args, **kwargs):
        node = Node()
        node.me = node
        made.append(weakref.ref(node))
        return apply_decision(*args, **kwargs)

    monkeypatch.setattr(run, "apply_decision", leaving_a_cycle)
    return made


def test_what_a_tick_keeps_is_in_the_oldest_generation_when_it_returns(cluster):
    gc.collect()  # every count at zero: without the scheme the first allocation after the pause
    # collects generation 0 and moves what the tick kept to generation 1
    outcome = run_tick(NOW_MS)

    assert outcome is not None and outcome.assigned == 1
    kept = run._newest_decision
    assert gc.is_tracked(kept)
    assert not in_generation(kept, 0) and not in_generation(kept, 1)
    assert in_generation(kept, 2)
    assert gc.get_freeze_count() == 0  # made old, not left frozen
    assert gc.isenabled()


def test_a_cycle_a_tick_leaves_is_collected_by_the_next_full_collection(cluster, a_cycle_per_tick):
    run_tick(NOW_MS)

    (cycle,) = a_cycle_per_tick
    gc.collect()
    assert cycle() is None


def test_a_cycle_made_between_ticks_is_collected_by_a_later_full_collection(cluster):
    run_tick(NOW_MS)
    node = Node()
    node.me = node
    cycle = weakref.ref(node)
    del node
    run_tick(NOW_MS)  # young when this tick ends (unless a collection found it first): made old

    gc.collect()
    assert cycle() is None


def test_the_full_collection_falls_due_when_what_was_made_old_passes_a_quarter_of_what_the_last_kept(
    cluster, a_cycle_per_tick, monkeypatch
):
    gc.collect()
    run_tick(NOW_MS)
    made_old = collector._made_old
    assert made_old > 0
    (cycle,) = a_cycle_per_tick
    assert cycle() is not None  # made old with the rest: waiting for a full collection

    monkeypatch.setattr(collector, "_kept_by_last_full", 4 * made_old)  # exactly a quarter: not due
    assert not collector.collect_if_due()
    assert cycle() is not None

    monkeypatch.setattr(collector, "_kept_by_last_full", 4 * made_old - 4)
    assert collector.collect_if_due()
    assert cycle() is None
    assert collector._made_old == 0
    assert collector._kept_by_last_full > 0
    assert not collector.collect_if_due()


def test_any_full_collection_restarts_the_count(cluster):
    run_tick(NOW_MS)
    assert collector._made_old > 0
    gc.collect()
    assert collector._made_old == 0


def test_a_failed_tick_leaves_its_objects_young(cluster, monkeypatch):
    """Its traceback's frames are cycles: a collection of the young generations frees them."""
    made_old = []
    monkeypatch.setattr(run, "make_survivors_old", lambda: made_old.append(True))

    def failing(*args, **kwargs):
        raise RuntimeError("the write phase failed")

    monkeypatch.setattr(run, "apply_decision", failing)
    with pytest.raises(RuntimeError):
        run_tick(NOW_MS)
    assert made_old == []
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_tick_skipped_on_the_lease_makes_nothing_old(cluster, monkeypatch):
    made_old = []
    monkeypatch.setattr(run, "make_survivors_old", lambda: made_old.append(True))
    assert acquire_lease("another tick", run.timezone.now())

    assert run_tick(NOW_MS) is None
    assert made_old == []


def test_objects_someone_froze_stay_frozen(cluster):
    """A server may freeze what it preloaded for good; ``gc.unfreeze()`` would thaw it."""
    preloaded = Node()
    gc.freeze()
    try:
        assert not any(o is preloaded for o in gc.get_objects())  # frozen: in no generation
        run_tick(NOW_MS)
        assert not any(o is preloaded for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_the_celery_tick_runs_the_due_collection_after_the_tick(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks, "start_prompt_tick", lambda scheduled: True)
    monkeypatch.setattr(tasks, "end_prompt_tick", lambda: calls.append("end"))
    monkeypatch.setattr(tasks, "run_tick", lambda: calls.append("tick"))
    monkeypatch.setattr(tasks, "collect_if_due", lambda: calls.append("collect if due"))

    tasks.tick()

    assert calls == ["tick", "end", "collect if due"]


def test_the_web_processs_tick_runs_the_due_collection_after_forgetting_what_it_kept(cluster, monkeypatch):
    calls = []
    forget_decision = run.forget_decision
    monkeypatch.setattr(run, "forget_decision", lambda: (forget_decision(), calls.append("forget")))
    monkeypatch.setattr(run, "collect_if_due", lambda: calls.append("collect if due"))

    run_tick_now(make_user("olga", role="operator"))

    assert calls == ["forget", "collect if due"]
    assert gc.get_freeze_count() == 0
