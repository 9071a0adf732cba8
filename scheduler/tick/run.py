"""One scheduling tick: lease -> load -> decide -> apply in one transaction -> record.

Two ticks never run at once: each takes the ``tick`` lease by compare-and-set and checks it
still holds it inside its write transaction (a fencing check), so a tick that stalled past its
lease cannot commit over a newer one. A tick that dies half-way rolls back entirely.

The lease is short (``IRIS_TICK_LEASE_SECONDS``, 10 s) and renewed at every phase boundary
(after the load, and after the decision as the write transaction's first statement), so a tick
that dies is replaced within one lease, while a long tick whose phases each take less keeps it;
a tick that finds it lost the lease stops there. The lease is given back inside the write
transaction, so a tick killed after its commit leaves nothing held at all.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler.foundation.access import require_operator
from scheduler.core.decision import collector_paused, decide
from scheduler.core.kueue import merge_into
from scheduler.core.reuse import DecidedSnapshot, remember, still_decided
from scheduler.foundation.errors import FailedPrecondition
from scheduler.execution.outbox import request_dispatch
from scheduler.foundation import instruments
from scheduler.store import lease
from scheduler.store.cluster_rows import forget_cluster_rows
from scheduler.store.clock import now_ms
from scheduler.board import publish
from scheduler.tick import events as tick_events
from scheduler.tick.apply import TickOutcome, apply_decision
from scheduler.tick.collector import collect_if_due, make_survivors_old
from scheduler.tick.kueue import plan_kueue, save_kueue_state
from scheduler.tick.load import load_snapshot

log = logging.getLogger(__name__)

LEASE_NAME = "tick"

# This process's newest decision with the snapshot it was made over: a tick whose snapshot
# shows nothing the decision depends on changed takes it again instead of deciding
# (scheduler.core.reuse says when that is exact). Read and replaced whole, never mutated.
_newest_decision: DecidedSnapshot | None = None


def forget_decision() -> None:
    """Decide afresh at the next tick (tests that replace ``decide`` must see it called)."""
    global _newest_decision
    _newest_decision = None
    publish.forget()
    tick_events.forget()


class LeaseLost(RuntimeError):
    """Another tick took the lease while this one was deciding; this one must not commit."""


def acquire_lease(holder: str, now: datetime) -> bool:
    """Take the tick lease if it is free or expired. True when this holder now owns it."""
    return lease.acquire(LEASE_NAME, holder, now, settings.TICK_LEASE_SECONDS)


def release_lease(holder: str) -> None:
    lease.release(LEASE_NAME, holder)


def keep_lease(holder: str, now: datetime, phase: str) -> None:
    """At a phase boundary: renew the lease for another ``IRIS_TICK_LEASE_SECONDS`` from
    ``now``, or raise :class:`LeaseLost` (it expired and another tick took it: stop here)."""
    if not lease.renew(LEASE_NAME, holder, now, settings.TICK_LEASE_SECONDS):
        raise LeaseLost(f"tick {holder} lost its lease {phase}")


def confirm_lease(holder: str, now: datetime | None = None) -> None:
    """Inside the write transaction: fail unless this holder still owns the lease (and renew it).

    The renewal's row lock is held until commit, so no other tick can take the lease between
    this check and the commit."""
    keep_lease(holder, now or timezone.now(), "before commit")


def run_tick(now: int | None = None, *, clock: Callable[[], datetime] = timezone.now) -> TickOutcome | None:
    """Run one scheduling tick. Returns None when another tick holds the lease.

    ``now`` is the scheduling time (ms) the decision is made at; ``clock`` the wall clock the
    lease is taken and renewed by (tests pass their own)."""
    # The tick also makes hundreds of thousands of short-lived objects beside the large cached
    # cluster (scheduler.store.cluster_rows): collections would walk all of it.
    with collector_paused():
        try:
            outcome = _run_tick(now, clock)
        except Exception:
            instruments.record_tick_failure()
            raise
        if outcome is not None:
            # What it kept (the rows, the decision, the publication) goes straight to the oldest
            # generation: otherwise the first allocation below starts a collection that scans
            # it all as young objects (scheduler.tick.collector).
            make_survivors_old()
    instruments.record_tick(outcome)
    return outcome


def _run_tick(now: int | None, clock: Callable[[], datetime]) -> TickOutcome | None:
    global _newest_decision
    holder = uuid.uuid4().hex
    started = time.perf_counter()
    wall = clock()
    if not acquire_lease(holder, wall):
        log.info("tick skipped: another tick holds the lease", extra={"outcome": "skipped"})
        return None
    try:
        tick_now = now if now is not None else now_ms()
        loaded = load_snapshot(tick_now)
        load_ms = (time.perf_counter() - started) * 1000
        keep_lease(holder, clock(), "while loading")
        decide_started = time.perf_counter()
        reused = still_decided(_newest_decision, loaded.snapshot)
        if reused:
            decision = _newest_decision.decision
        else:
            decision = decide(loaded.snapshot)
            _newest_decision = remember(loaded.snapshot, decision)
        # Work routed to Kubernetes: ranked and promoted at a capped rate (Kueue admits it).
        kueue = plan_kueue(loaded.snapshot, loaded.kueue, decision)
        decision = merge_into(decision, kueue)
        decide_ms = (time.perf_counter() - decide_started) * 1000
        with transaction.atomic():
            # Renewed after the decision, and fenced: the row stays locked until commit.
            confirm_lease(holder, clock())
            outcome = apply_decision(loaded, decision, wall, started, decide_ms)
            save_kueue_state(loaded.routes, loaded.kueue, kueue)
            # Given back with the commit: a tick killed right after it holds nothing.
            lease.release(LEASE_NAME, holder)
            if outcome.assigned or outcome.preempted:
                # Deliver the new START/STOP intents right after commit; a broker outage is
                # logged, never raised (beat drains the outbox every IRIS_DISPATCH_SECONDS).
                transaction.on_commit(request_dispatch, robust=True)
    except BaseException:
        # After a failure (the transaction rolled back, the lease with it): give it back now.
        release_lease(holder)
        raise
    outcome = replace(outcome, load_ms=load_ms, decide_ms=decide_ms, refresh=loaded.refresh)
    apply_ms = max(outcome.duration_ms - load_ms - decide_ms, 0.0)
    log.info(
        "tick %s: %d assigned, %d preempted, %d expired, %d conflicts, %.0f ms "
        "(load %.0f ms reading %s, decide %.0f ms%s, apply %.0f ms)",
        outcome.tick_id,
        outcome.assigned,
        outcome.preempted,
        outcome.expired,
        outcome.skipped_conflicts,
        outcome.duration_ms,
        load_ms,
        "changes" if loaded.refresh == "changes" else "everything",
        decide_ms,
        " reusing the previous decision: nothing it depends on changed" if reused else "",
        apply_ms,
        extra={
            "tick": outcome.tick_id,
            "outcome": "ran",
            "assigned": outcome.assigned,
            "preempted": outcome.preempted,
            "expired": outcome.expired,
            "conflicts": outcome.skipped_conflicts,
            "duration_ms": round(outcome.duration_ms, 1),
            "load_ms": round(load_ms, 1),
            "decide_ms": round(decide_ms, 1),
            "decision_reused": reused,
            "apply_ms": round(apply_ms, 1),
            "refresh": loaded.refresh,
        },
    )
    return outcome


def run_tick_now(actor):
    """Operators run one scheduling tick synchronously. FAILED_PRECONDITION if one is running.

    It runs in the web process, which ticks again only when an operator asks: it keeps neither
    the cluster rows nor the decision a tick process keeps for its next tick (at 100,000 tasks,
    some 400,000 objects every later collection of this process would rescan, ~200 ms each).
    What the tick made old and that is then forgotten is freed at once; a cycle among it waits
    for the full collection that falls due (``collect_if_due``), run here after forgetting."""
    require_operator(actor, "run ticks")
    try:
        outcome = run_tick()
    finally:
        forget_cluster_rows()
        forget_decision()
        collect_if_due()
    if outcome is None:
        raise FailedPrecondition("another tick holds the tick lease; try again in a moment")
    return outcome
