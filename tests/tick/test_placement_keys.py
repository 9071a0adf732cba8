"""The rows a placement writes name their task and worker without database foreign-key
constraints (a burst writes tens of thousands; see ``scheduler.models.Attempt``). On
PostgreSQL the tick itself keeps those workers from being deleted until it commits."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from scheduler.models import Attempt, DispatchIntent
from scheduler.tick import run as tick_run
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def other_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        dbname=db["NAME"],
        user=db["USER"],
        password=db["PASSWORD"] or None,
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        autocommit=True,
    )


def test_the_tick_holds_the_workers_it_places_on_until_commit(monkeypatch):
    worker = make_worker("w1")
    idle = make_worker("w2", cpu=0.5)  # too small for the job: nothing names it
    make_job("/alice/a")
    seen = {}
    real_save = tick_run.save_kueue_state

    def save_then_try_to_lock(*args):
        real_save(*args)  # inside the tick's write transaction, after every write
        with other_connection() as other:
            for name, pk in (("placed", worker.pk), ("idle", idle.pk)):
                try:
                    # What a DELETE of the worker would need first.
                    other.execute("SELECT id FROM scheduler_worker WHERE id = %s FOR UPDATE NOWAIT", [pk])
                    seen[name] = "free"
                except psycopg.errors.LockNotAvailable:
                    seen[name] = "held"

    monkeypatch.setattr(tick_run, "save_kueue_state", save_then_try_to_lock)
    outcome = run_tick(NOW_MS)

    assert outcome.assigned == 1
    assert seen == {"placed": "held", "idle": "free"}
    attempt = Attempt.objects.get()
    intent = DispatchIntent.objects.get()
    assert (attempt.worker_id, intent.worker_id, intent.task_id) == (worker.pk, worker.pk, attempt.task_id)
    with other_connection() as other:
        other.execute("SELECT id FROM scheduler_worker WHERE id = %s FOR UPDATE NOWAIT", [worker.pk])  # free now
