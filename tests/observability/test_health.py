"""/healthz, /readyz and the console's readiness card: each failed dependency is named."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from iris_web.celery import app as celery_app
from scheduler.models import DispatchIntent, TickRecord
from scheduler.observability import health
from tests.personas import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_tick():
    return TickRecord.objects.create(started_at=timezone.now(), now_ms=0, duration_ms=1)


def ready(client):
    response = client.get("/readyz")
    return response.status_code, response.json()


def test_healthz_answers_json_without_touching_dependencies(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_ready_when_every_check_passes(client, fresh_tick):
    status, body = ready(client)

    assert status == 200, body
    assert body["status"] == "ok" and body["failed"] == []
    assert [c["name"] for c in body["checks"]] == ["database", "migrations", "broker", "tick", "outbox"]
    assert all(c["status"] == "ok" and c["ms"] >= 0 for c in body["checks"])


def test_not_ready_before_the_first_tick(client):
    status, body = ready(client)

    assert status == 503
    assert body["failed"] == ["tick"]
    assert "no tick" in next(c for c in body["checks"] if c["name"] == "tick")["detail"]


def test_not_ready_when_the_newest_tick_is_three_intervals_old(client):
    TickRecord.objects.create(
        started_at=timezone.now() - timedelta(seconds=3 * settings.TICK_SECONDS + 2), now_ms=0, duration_ms=1
    )

    status, body = ready(client)

    assert status == 503 and body["failed"] == ["tick"]


def test_not_ready_when_a_dispatch_intent_is_stuck(client, fresh_tick, alice):
    job = submit(alice, "train", cpu=1)
    DispatchIntent.objects.create(
        task=job.tasks.get(), attempt_number=1, kind="start", state="failed", created_at=timezone.now()
    )

    status, body = ready(client)

    assert status == 503 and body["failed"] == ["outbox"]


def test_not_ready_when_a_migration_is_unapplied(client, fresh_tick, monkeypatch):
    monkeypatch.setattr(health, "_migrations_applied", False)
    latest = MigrationRecorder(connection).migration_qs.filter(app="scheduler").order_by("-name").first()
    latest.delete()

    status, body = ready(client)

    assert status == 503 and body["failed"] == ["migrations"]
    assert latest.name in next(c for c in body["checks"] if c["name"] == "migrations")["detail"]


def test_not_ready_when_the_broker_does_not_answer(client, fresh_tick, monkeypatch):
    # Nothing listens on port 1: the connection is refused at once.
    monkeypatch.setitem(celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setitem(celery_app.conf, "broker_write_url", None)
    monkeypatch.setitem(celery_app.conf, "broker_transport_options", {})

    status, body = ready(client)

    assert status == 503 and body["failed"] == ["broker"]
    assert "refused" in next(c for c in body["checks"] if c["name"] == "broker")["detail"].lower()


def test_not_ready_when_the_database_does_not_answer(client, fresh_tick, monkeypatch):
    broken = connections.create_connection(DEFAULT_DB_ALIAS)
    name = "/nonexistent/iris.sqlite3" if broken.vendor == "sqlite" else "iris_no_such_database"
    broken.settings_dict = {**broken.settings_dict, "NAME": name}
    connections["broken"] = broken
    monkeypatch.setattr(health, "DATABASE_ALIAS", "broken")
    monkeypatch.setattr(health, "_migrations_applied", False)
    try:
        status, body = ready(client)
    finally:
        broken.close()
        del connections["broken"]

    assert status == 503
    assert body["failed"] == ["database", "migrations"]


def test_the_scheduler_page_shows_the_same_checks(client, olivia, monkeypatch):
    client.force_login(olivia)

    page = client.get("/scheduler/").content.decode()

    for name in ("database", "migrations", "broker", "tick", "outbox"):
        assert f'data-check="{name}"' in page
    assert "failing: tick" in page
    TickRecord.objects.create(started_at=timezone.now(), now_ms=0, duration_ms=1)
    assert "all checks pass" in client.get("/scheduler/").content.decode()


def test_the_scheduler_page_and_status_pass_over_the_intents_once_and_name_the_stuck_ones(
    client, olivia, fresh_tick, alice
):
    """The dispatch card's counts, its stuck count and readiness's outbox check come from one
    statement over the intents (and the page's list of stuck intents from one more): behind a
    stopped dispatcher each pass reads every open intent."""
    from tests.personas import token_client

    job = submit(alice, "train", cpu=1)
    DispatchIntent.objects.create(
        task=job.tasks.get(), attempt_number=1, kind="start", state="failed", created_at=timezone.now()
    )
    client.force_login(olivia)
    api = token_client(olivia)

    for http, url, statements in ((client, "/scheduler/", 2), (api, "/api/v1/scheduler/status", 1)):
        with CaptureQueriesContext(connection) as captured:
            body = http.get(url).content.decode()
        reads = [q["sql"] for q in captured.captured_queries if "scheduler_dispatchintent" in q["sql"]]
        assert len(reads) == statements, (url, reads)
        assert "1 dispatch intent(s) stuck" in body, url


def test_the_status_endpoint_is_for_operators(alice, olivia, ada):
    from tests.personas import token_client

    assert token_client().get("/api/v1/scheduler/status").status_code == 401
    assert token_client(alice).get("/api/v1/scheduler/status").status_code == 403
    assert token_client(olivia).get("/api/v1/scheduler/status").status_code == 200
    assert token_client(ada).get("/api/v1/scheduler/status").status_code == 200
