"""How a drain picks its batch and writes what became of it (scheduler.execution.dispatcher):
the due intents in id order whether never tried or due again, every outcome of a batch in one
statement, and nothing written over an intent that another actor closed while its batch was out.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler import backends
from scheduler.backends import Backend, BackendError, Delivery
from scheduler.execution import dispatcher, workers
from scheduler.execution.dispatcher import drain
from scheduler.jobs.cancel import cancel_job
from scheduler.models import DispatchIntent, Worker
from tests.execution.test_outbox import RecordingBackend, assign, intent
from tests.personas import make_job, make_user, make_worker

pytestmark = pytest.mark.django_db


def test_a_batch_takes_the_first_due_intents_by_id_never_tried_and_due_again_alike():
    recording = RecordingBackend()
    backends.register_backend("local", recording)
    worker = make_worker("w1", cpu=64, memory_gib=256)
    now = timezone.now()
    before = [assign(make_job(f"/alice/old{i}"), worker) for i in range(3)]
    DispatchIntent.objects.filter(task__in=before[:2]).update(state="delivered", tries=1)
    DispatchIntent.objects.filter(task=before[2]).update(state="done", tries=1)
    assign(make_job("/alice/fresh"), worker)
    again = assign(make_job("/alice/again"), worker)
    later = assign(make_job("/alice/later"), worker)
    assign(make_job("/alice/fresh-too"), worker)
    DispatchIntent.objects.filter(task=again).update(tries=1, next_try_at=now - timedelta(seconds=1))
    DispatchIntent.objects.filter(task=later).update(tries=1, next_try_at=now + timedelta(minutes=5))

    first = drain(now, batch_size=2, max_batches=1)
    second = drain(now, batch_size=2, max_batches=1)

    assert (first.delivered, second.delivered) == (2, 1)
    assert [o.task for o in recording.starts] == ["/alice/fresh/0", "/alice/again/0", "/alice/fresh-too/0"]
    assert intent(later).state == "pending" and intent(later).tries == 1


class ClosingBackend(Backend):
    """While an order is out, another actor closes intents (an agent's acknowledgement, a tick
    ending the attempt): ``close`` on every start; ``fail`` makes each start then fail."""

    name = "closing"
    heartbeats = False

    def __init__(self, close: list[int], fail: bool = False):
        self.close, self.fail = close, fail

    def start(self, order):
        DispatchIntent.objects.filter(pk__in=self.close).update(state="done")
        if self.fail:
            raise BackendError("cluster API timed out")
        return Delivery.DELIVERED

    def stop(self, order):
        return Delivery.DONE


def test_an_intent_closed_while_its_failed_delivery_was_out_stays_done():
    worker = make_worker("w1")
    task = assign(make_job("/alice/a"), worker)
    backends.register_backend("local", ClosingBackend(close=[intent(task).pk], fail=True))

    result = drain()

    assert result.retried == 1
    closed = intent(task)
    # Not put back to PENDING to be sent again: the retry is written only over a pending intent.
    assert (closed.state, closed.next_try_at, closed.last_error) == ("done", None, "")


def test_a_held_start_closed_while_its_batch_was_out_is_left_as_closed():
    worker = make_worker("w1", cpu=1, memory_gib=4)
    sent = assign(make_job("/alice/first", cpu=1, memory_gib=1), worker)
    held = assign(make_job("/alice/second", cpu=1, memory_gib=1), worker)  # no room left on w1 for it
    backends.register_backend("local", ClosingBackend(close=[intent(held).pk]))

    result = drain()

    assert (result.delivered, result.held) == (1, 1)
    assert intent(sent).state == "delivered"
    closed = intent(held)
    assert (closed.state, closed.next_try_at, closed.last_error) == ("done", None, "")


def test_every_outcome_of_a_batch_is_written_in_one_statement_whatever_its_mix():
    flaky = RecordingBackend(fail_with=BackendError("down"), fail_after=1)
    backends.register_backend("local", flaky)
    alice = make_user("alice")
    roomy = make_worker("w1", cpu=64, memory_gib=256)
    full = make_worker("w2", cpu=1, memory_gib=4)
    delivered = assign(make_job("/alice/delivered"), roomy)
    retried = assign(make_job("/alice/retried"), roomy)
    cancelled = assign(make_job("/alice/cancelled"), roomy)
    cancel_job(alice, "/alice/cancelled")
    on_full = assign(make_job("/alice/fits", cpu=1, memory_gib=1), full)
    held = assign(make_job("/alice/held", cpu=1, memory_gib=1), full)

    with CaptureQueriesContext(connection) as queries:
        result = drain()

    assert (result.delivered, result.retried, result.held, result.done) == (1, 2, 1, 2)
    assert intent(delivered).state == "delivered"
    assert {intent(retried).state, intent(on_full).state} == {"pending"}
    assert intent(retried).last_error == "BackendError: down" and intent(retried).next_try_at is not None
    assert (intent(cancelled, "start").state, intent(cancelled, "stop").state) == ("done", "done")
    assert intent(held).last_error == "held: waiting for capacity on w2 still held by stopping attempts"
    table = DispatchIntent._meta.db_table
    # (Django logs an executemany, SQLite's form of a set-based update, as "N times: <sql>".)
    statements = [re.sub(r"^\d+ times: ", "", q["sql"]).lstrip() for q in queries.captured_queries]
    writes = [sql for sql in statements if sql.upper().startswith("UPDATE")]
    intent_writes = [sql for sql in writes if table in sql.split("SET")[0]]
    # The try counted before sending, then every outcome at once.
    assert len(intent_writes) == 2


def test_a_start_held_before_and_then_cancelled_keeps_why_it_was_held():
    worker = make_worker("w1", cpu=1, memory_gib=4)
    backends.register_backend("local", RecordingBackend())
    assign(make_job("/alice/first", cpu=1, memory_gib=1), worker)
    held = assign(make_job("/alice/second", cpu=1, memory_gib=1), worker)
    drain()
    message = intent(held).last_error
    assert message.startswith("held:")

    cancel_job(make_user("alice"), "/alice/second")
    drain(timezone.now() + timedelta(seconds=dispatcher.HELD_RECHECK_SECONDS + 1))

    done = intent(held)
    assert (done.state, done.next_try_at, done.last_error) == ("done", None, message)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan")
def test_the_never_tried_intents_come_from_their_partial_index_not_a_walk_of_every_intent():
    worker = make_worker("w1")
    assign(make_job("/alice/a"), worker)
    Worker.objects.update(backend="local")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN " + dispatcher.DUE_IDS_SQL,
            ["pending", 0, 500, "pending", timezone.now(), 0, 500, 500],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "intent_fresh" in plan
    assert "scheduler_dispatchintent_pkey" not in plan


def explained(sql: str, params: list) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan")
def test_the_intents_a_tick_writes_are_left_out_of_the_state_and_worker_indexes_their_readers_still_read():
    worker = make_worker("w1")
    assign(make_job("/alice/a"), worker)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [DispatchIntent._meta.db_table]
        )
        definitions = dict(cursor.fetchall())
    # Migration 0037: the model's (state, next_try_at) and (worker, state) indexes, partial.
    by_state, by_worker = "scheduler_d_state_1a0c6d_idx", "scheduler_d_worker__c0ab62_idx"
    never_tried = "WHERE (NOT ((next_try_at IS NULL) AND ((state)::text = 'pending'::text)))"
    assert definitions[by_state].endswith(never_tried)
    assert definitions[by_worker].endswith(never_tried)
    # Each reader's condition implies the indexes' (PostgreSQL proves it, so it reads them).
    due_again = explained(dispatcher.DUE_IDS_SQL, ["pending", 0, 500, "pending", timezone.now(), 0, 500, 500])
    assert by_state in due_again
    assert by_worker in explained(workers.MAILBOX_IDS_SQL, [worker.pk, "delivered", 100])
    held = DispatchIntent.objects.filter(
        worker_id__in=[worker.pk], state="pending", kind="start", tries=0, next_try_at__isnull=False
    )
    assert {by_state, by_worker} & set(re.findall(r"using (\w+)", explained(*held.query.sql_with_params())))
    failed = DispatchIntent.objects.filter(state="failed").values_list("pk")
    assert by_state in explained(*failed.query.sql_with_params())


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's plan")
def test_on_sqlite_the_state_and_worker_indexes_stay_whole_so_a_workers_mailbox_reads_its_index():
    # SQLite uses a partial index only where the query repeats its condition: migration 0037
    # leaves these two whole there.
    worker = make_worker("w1")
    assign(make_job("/alice/a"), worker)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN QUERY PLAN " + workers.MAILBOX_IDS_SQL,
            [worker.pk, "delivered", 100],
        )
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "scheduler_d_worker__c0ab62_idx" in plan
