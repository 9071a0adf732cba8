"""``iris scheduler status`` against a live server, and the operator-only endpoint behind it."""

from __future__ import annotations

from django.utils import timezone

from scheduler.models import TickRecord, Worker
from scheduler.tick.run import run_tick
from tests.personas import submit


def test_status_shows_ticks_leases_outbox_workers_pending_and_readiness(iris, personas):
    Worker.objects.create(name="w1", cpu_millicores=1000, memory_bytes=1 << 30, last_heartbeat=timezone.now())
    submit(personas["alice"], "big", cpu=2, replicas=2)  # no worker is big enough: stays pending
    outcome = run_tick()
    iris.use_token("olivia")

    result = iris("scheduler", "status")

    assert result.code == 0, result.err
    assert "last tick" in result.out and "interactive 2" in result.out
    assert "local/healthy 1" in result.out
    assert str(outcome.tick_id) in result.out and "TOOK" in result.out
    assert "LEASE" in result.out and "tick" in result.out
    for check in ("database", "migrations", "broker", "tick", "outbox"):
        assert check in result.out

    data = iris("scheduler", "status", "--json").json()
    assert data["ticks"][0]["id"] == outcome.tick_id and data["ticks"][0]["pending"] == 2
    assert data["pending"]["interactive"] == 2
    assert data["workers"] == [{"backend": "local", "health": "healthy", "count": 1}]
    assert {lease["name"] for lease in data["leases"]} >= {"tick"}
    assert set(data["outbox"]) == {"pending", "delivered", "failed", "stuck"}
    assert data["readiness"]["status"] == "ok", data["readiness"]


def test_status_names_the_failed_check(iris):
    TickRecord.objects.create(started_at=timezone.now() - timezone.timedelta(hours=1), now_ms=0, duration_ms=1)
    iris.use_token("olivia")

    result = iris("scheduler", "status")

    assert result.code == 0
    assert "NO: tick" in result.out.splitlines()[1]


def test_status_is_for_operators(iris):
    iris.use_token("alice")

    result = iris("scheduler", "status")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED")
