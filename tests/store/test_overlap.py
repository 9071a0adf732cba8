"""Work run beside the tick's writes (``scheduler.store.overlap.alongside``): its value and its
errors come back to the caller, what it registers with ``on_commit`` joins the caller's
transaction (run at its commit, in order, dropped at its rollback), it cannot query, and the
block never ends before the work has."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, transaction

from scheduler.models import TickRecord
from scheduler.store import overlap
from scheduler.store.overlap import alongside

pytestmark = pytest.mark.django_db(transaction=True)

ON_POSTGRESQL = connection.vendor == "postgresql"


def test_the_work_runs_beside_the_block_on_postgresql_and_inline_elsewhere():
    caller = threading.get_ident()
    seen = []
    with alongside(lambda: seen.append(threading.get_ident()) or 42) as work:
        assert work.result() == 42
    assert len(seen) == 1
    assert (seen[0] != caller) is ON_POSTGRESQL


def test_its_on_commit_callbacks_join_the_callers_transaction_in_order():
    ran = []
    with transaction.atomic():
        transaction.on_commit(lambda: ran.append("before"))

        def work():
            transaction.on_commit(lambda: ran.append("work"))
            return "done"

        with alongside(work) as rest:
            TickRecord.objects.create(started_at="2026-12-07T08:00:00Z", now_ms=0, duration_ms=0)
            assert rest.result() == "done"
        assert ran == []  # not run at once: the caller's transaction is still open
        transaction.on_commit(lambda: ran.append("after"))
    assert ran == ["before", "work", "after"]


def test_its_on_commit_callbacks_are_dropped_with_a_rollback():
    ran = []

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        with alongside(lambda: transaction.on_commit(lambda: ran.append("work"))) as rest:
            rest.result()
        raise Boom
    assert ran == []


def test_an_error_in_the_work_reaches_the_caller():
    with pytest.raises(ZeroDivisionError), alongside(lambda: 1 / 0) as work:
        work.result()


@pytest.mark.postgres
@pytest.mark.skipif(not ON_POSTGRESQL, reason="the work runs in a second thread on PostgreSQL only")
def test_the_work_may_not_query():
    with transaction.atomic():
        with alongside(lambda: TickRecord.objects.count()) as work:
            pass
        with pytest.raises(DatabaseError, match="thread"):
            work.result()
        assert TickRecord.objects.count() == 0  # the caller's connection still serves it


def test_the_block_waits_for_the_work_and_restores_the_switch_interval():
    import sys

    before = sys.getswitchinterval()
    finished = threading.Event()

    def slow():
        assert sys.getswitchinterval() <= overlap.SWITCH_INTERVAL
        finished.wait(0.2)
        finished.set()

    with alongside(slow):
        pass  # the block asks for no result: it still ends only after the work
    assert finished.is_set()
    assert sys.getswitchinterval() == before
