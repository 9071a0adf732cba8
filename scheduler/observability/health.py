"""Readiness checks: can this deployment do its work right now?

Each check answers ``(ok, detail)`` and is timed; ``readiness()`` runs them all, in a fixed
order, and never raises. They are cheap enough to poll every few seconds (docs/observability.md
records the measured cost): one short query each, the migration check's graph walk cached once
it has passed, a broker connection with a short timeout.

- ``database``: ``SELECT 1`` answers.
- ``migrations``: no migration is left unapplied.
- ``broker``: Celery's broker (whatever ``CELERY_BROKER_URL`` says) accepts a connection.
- ``tick``: the newest tick started less than ``TICK_STALE_PERIODS`` tick intervals ago.
- ``outbox``: no dispatch intent is stuck (``scheduler.execution.outbox.stuck_intents``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from scheduler.execution.outbox import stuck_intents
from scheduler.models import TickRecord

# The newest tick may be this many tick intervals old before readiness fails: one late tick is
# a slow tick, three in a row mean beat or the tick worker is not running.
TICK_STALE_PERIODS = 3
# The connection the database and migration checks use.
DATABASE_ALIAS = DEFAULT_DB_ALIAS


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    ms: float
    detail: str


@dataclass(frozen=True)
class Readiness:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def as_json(self) -> dict:
        return {
            "status": "ok" if self.ok else "fail",
            "failed": self.failed,
            "checks": [{**asdict(c), "ms": round(c.ms, 2), "status": "ok" if c.ok else "fail"} for c in self.checks],
        }


def check_database() -> tuple[bool, str]:
    with connections[DATABASE_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return True, connections[DATABASE_ALIAS].vendor


_migrations_applied = False


def check_migrations() -> tuple[bool, str]:
    """Unapplied migrations fail readiness. Once passed, not checked again in this process: a
    process's code does not change under it, and the walk of the graph is the costly part."""
    global _migrations_applied
    if _migrations_applied:
        return True, "all applied"
    executor = MigrationExecutor(connections[DATABASE_ALIAS])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        return False, f"{len(plan)} unapplied: {names}"
    _migrations_applied = True
    return True, "all applied"


def check_broker() -> tuple[bool, str]:
    timeout = settings.READY_BROKER_TIMEOUT_SECONDS
    # The project's Celery app (iris_web/__init__.py makes it the current one in every process).
    with current_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout, interval_start=0, interval_step=0, interval_max=0)
        return True, conn.as_uri()


def check_tick(now: datetime | None = None) -> tuple[bool, str]:
    now = now or timezone.now()
    started = TickRecord.objects.order_by("-pk").values_list("started_at", flat=True).first()
    if started is None:
        return False, "no tick has run yet"
    age = (now - started).total_seconds()
    limit = TICK_STALE_PERIODS * settings.TICK_SECONDS
    # The detail names the tick's time rather than its age, so it reads the same on every poll.
    at = f"{started:%Y-%m-%d %H:%M:%S} UTC"
    if age > limit:
        return False, f"newest tick, at {at}, is older than {limit} s: is Celery beat running?"
    return True, f"newest tick at {at} (limit {limit} s)"


def check_outbox(now: datetime | None = None, *, stuck: int | None = None) -> tuple[bool, str]:
    """``stuck``: the stuck intents' count when the caller has just read it (see :func:`readiness`)."""
    if stuck is None:
        stuck = stuck_intents(now).count()
    if stuck:
        return False, f"{stuck} dispatch intent(s) stuck"
    return True, "nothing stuck"


CHECKS: tuple[tuple[str, Callable[[], tuple[bool, str]]], ...] = (
    ("database", check_database),
    ("migrations", check_migrations),
    ("broker", check_broker),
    ("tick", check_tick),
    ("outbox", check_outbox),
)


def run_check(name: str, check: Callable[[], tuple[bool, str]]) -> Check:
    started = time.perf_counter()
    try:
        ok, detail = check()
    except Exception as exc:  # noqa: BLE001 -- a failed dependency is an answer, not an error
        ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
    return Check(name, ok, (time.perf_counter() - started) * 1000, detail)


def readiness(*, stuck: int | None = None) -> Readiness:
    """Every check, in order. A later check still runs when an earlier one failed, so the answer
    names every failed dependency (the database-backed ones then fail too, with their error).

    ``stuck``: the stuck dispatch intents, when the caller has just counted them
    (``outbox.intent_counts``: the scheduler page and status show both), so the outbox check
    does not count them again: behind a stopped dispatcher that count is a pass over every
    open intent (25-40 ms on the server at 67,000)."""
    checks = CHECKS
    if stuck is not None:
        checks = tuple((name, partial(check_outbox, stuck=stuck) if c is check_outbox else c) for name, c in CHECKS)
    return Readiness(tuple(run_check(name, check) for name, check in checks))
