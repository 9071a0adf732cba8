"""What a tick leaves alive made old for Python's cyclic garbage collector at once, instead of
rescanned as young objects; and the full collections that then fall due.

CPython 3.11 keeps tracked objects in three generations. A collection of generation 0 starts when
the tracked objects allocated (less those freed) since the last one exceed 700; it scans
generation 0 and moves what survives to generation 1. Every tenth collection of generation 0 is
one of generation 1, which moves its survivors to generation 2 and counts them as "pending".
Generation 2 is collected (a full collection, which scans every object) only when pending exceeds
a quarter of what the last full collection kept: a full collection's cost stays proportional to
the objects made old since the last one.

The tick runs with the collector paused (``scheduler.core.decision.collector_paused``), so
everything it made and kept (the cluster rows it keeps for the next tick, the remembered
decision, the publication) is still in generation 0 when it ends: the first allocation after it
started a collection that scanned all of that (30-150 ms at 100,000 tasks; a collection of
generation 1 when one was due), and a later collection of generation 1 scanned it again.
:func:`make_survivors_old` moves it into generation 2 without a scan (``gc.freeze()`` then
``gc.unfreeze()``: two list splices) and counts it, since CPython does not count objects moved
that way as pending; :func:`collect_if_due` runs the full collection CPython's rule would have
run for them, where its caller chooses (the tick's Celery task, after the tick). A reference
cycle the tick leaves unreachable is collected by the next full collection, as any cycle in
generation 2 is. What is counted is at least the heap's growth through the ticks, so where
``collect_if_due`` runs after the ticks, the cycles they leave uncollected stay under a quarter
of what the last full collection kept (the few objects generation 1 held when a tick ended are
made old uncounted: the survivors of at most ten collections of generation 0).
"""

from __future__ import annotations

import gc

# Tracked objects made old by make_survivors_old since the last full collection (at least the
# heap's growth through them), and how many objects the last full collection run by
# collect_if_due kept (None before the first: the first due check collects).
_made_old = 0
_kept_by_last_full: int | None = None
_watching = False


def make_survivors_old() -> None:
    """Move every object the collector tracks into its oldest generation without scanning it,
    and count the young ones toward the next full collection (:func:`collect_if_due`).

    Called with the collector paused, at the end of a block whose survivors live on (a tick):
    the net count of tracked objects allocated since the last collection
    (``gc.get_count()[0]``, which never goes below zero, so it is at least the heap's growth) is
    what is counted. Does nothing when objects are frozen already (a server that froze its
    preloaded objects for good: ``gc.unfreeze()`` would thaw them)."""
    global _made_old
    if gc.get_freeze_count():
        return
    _watch_full_collections()
    _made_old += gc.get_count()[0]
    gc.freeze()
    gc.unfreeze()


def collect_if_due() -> bool:
    """Run a full collection if the objects made old since the last full collection exceed a
    quarter of what the last one kept (CPython's rule for its own full collections), or if
    objects were made old and no full collection has run yet. True when it collected."""
    global _kept_by_last_full
    if not _made_old or (_kept_by_last_full is not None and _made_old <= _kept_by_last_full // 4):
        return False
    gc.collect()
    if gc.get_freeze_count():
        _kept_by_last_full = len(gc.get_objects(generation=2))
    else:
        # How many objects the collection kept: counted while frozen (walking one list, a
        # quarter of the cost of listing them), then thawed back into the oldest generation.
        gc.freeze()
        _kept_by_last_full = gc.get_freeze_count()
        gc.unfreeze()
    return True


def _watch_full_collections() -> None:
    """Reset the count of objects made old whenever generation 2 is collected (by CPython's own
    rule, by ``gc.collect()`` or by :func:`collect_if_due`)."""
    global _watching
    if not _watching:
        gc.callbacks.append(_full_collection_ran)
        _watching = True


def _full_collection_ran(phase: str, info: dict) -> None:
    global _made_old
    if phase == "stop" and info["generation"] == 2:
        _made_old = 0
