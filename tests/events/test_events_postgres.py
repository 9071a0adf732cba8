"""The event stream on PostgreSQL: a tick killed (SIGKILL) inside its transaction, and
transactions committing out of the order they staged in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from scheduler.events.record import Draft, record
from scheduler.events.sequence import sequence_events
from scheduler.events.stream import EventQuery, read_events
from scheduler.models import Attempt, DispatchIntent, Event, StagedEvent, Task
from scheduler.tick.run import run_tick
from tests.personas import make_worker, submit

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# The child: a real tick whose transaction stops, after its events are staged, until killed.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import django
    django.setup()
    from scheduler.tick import apply

    original = apply.record_tick_events

    def record_then_hang(*args, **kwargs):
        original(*args, **kwargs)
        open(sys.argv[1], "w").write(str(os.getpid()))
        time.sleep(120)

    apply.record_tick_events = record_then_hang
    from scheduler.tick.run import run_tick
    run_tick()
    """
)


def kill_a_tick_inside_its_transaction(tmp_path: Path) -> None:
    marker = tmp_path / "staged"
    env = dict(os.environ)
    db = connection.settings_dict
    env["IRIS_DATABASE_URL"] = f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "iris_web.settings"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], env=env, cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the child tick ended before staging its events"
            assert time.monotonic() < deadline, "the child tick never staged its events"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    # The server notices the dead client and rolls its transaction back.
    deadline = time.monotonic() + 30
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state LIKE 'idle in transaction%%'"
            )
            if cursor.fetchone()[0] == 0:
                return
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_tick_killed_inside_its_transaction_leaves_no_event_without_its_change_nor_a_change_without_its_event(
    alice, tmp_path
):
    make_worker("w1", cpu=4, memory_gib=16)
    for name in ("a", "b", "c"):
        submit(alice, name, cpu=1, memory="1Gi")
    sequence_events()
    before = Event.objects.count()

    kill_a_tick_inside_its_transaction(tmp_path)

    assert not Attempt.objects.exists()
    assert not DispatchIntent.objects.exists()
    assert set(Task.objects.values_list("state", flat=True)) == {"pending"}
    assert not StagedEvent.objects.exists()
    assert Event.objects.count() == before

    # The next tick (once the dead one's lease has run out) writes both.
    later = timezone.now() + timedelta(minutes=1)
    assert run_tick(clock=lambda: later) is not None
    sequence_events()
    started = {(e.job, e.task_index, e.attempt) for e in Event.objects.filter(kind="started")}
    attempts = set(Attempt.objects.values_list("task__job__name", "task__index", "number"))
    assert started == attempts and len(attempts) == 3


def test_an_event_committed_after_a_later_staged_one_is_not_skipped_by_a_reader(alice):
    """Transaction A stages first and commits last; a reader that read B's event and resumes
    from its id must still get A's."""
    a_staged, b_done = threading.Event(), threading.Event()

    def writer_a():
        try:
            with transaction.atomic():
                record([Draft("submitted", timezone.now(), "alice", "/alice/a")])
                a_staged.set()
                b_done.wait(20)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer_a)
    thread.start()
    assert a_staged.wait(20)
    with transaction.atomic():
        record([Draft("submitted", timezone.now(), "alice", "/alice/b")])
    first = read_events(alice, EventQuery())
    b_done.set()
    thread.join(20)

    resumed = read_events(alice, EventQuery(since=first.next))

    assert [e.job for e in first.events] == ["/alice/b"]
    assert [e.job for e in resumed.events] == ["/alice/a"]
    assert resumed.events[0].id > first.events[0].id


def _stage_and_move(count: int) -> None:
    now = timezone.now()
    with transaction.atomic():
        record([Draft("submitted", now, f"u{n % 50}", f"/u{n % 50}/j{n}") for n in range(count)])
    sequence_events()


def test_the_wakers_look_reads_new_events_by_the_key_on_a_table_never_analysed():
    """The look's query is bounded by the newest id, so it reads by the primary key even where the
    event table has no statistics (a restored database): unbounded, the planner scanned and
    sorted the whole table on every look."""
    from scheduler.events.wake import read_seen, seen_rows

    _stage_and_move(3000)
    newest = Event.objects.order_by("-id").values_list("id", flat=True)[0]

    plan = seen_rows(newest - 10)[:5000].explain()

    assert "Seq Scan on scheduler_event " not in plan + " " and "scheduler_event_pkey" in plan
    assert [e.id for e in read_seen(newest - 10, 5000)] == list(range(newest - 9, newest + 1))


def test_a_move_reads_the_staging_queue_by_its_key_past_the_dead_rows_of_earlier_moves():
    """After earlier moves the staging table holds their dead rows until vacuum; a move of a few
    new ones reads them by the key, not by a scan of every dead row (the statistics cannot tell
    the planner the table is a near-empty queue)."""
    _stage_and_move(3000)  # 3,000 dead rows in the staging table
    now = timezone.now()
    with transaction.atomic():
        record([Draft("submitted", now, "alice", f"/alice/new{n}") for n in range(5)])
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        assert sequence_events() == 5
    move = next((sql, params) for sql, params in statements if sql.startswith("WITH moved AS"))
    settings = [sql for sql, _ in statements[: statements.index(move)] if sql.startswith("SET LOCAL")]

    with transaction.atomic(), connection.cursor() as cursor:
        for sql in settings:
            cursor.execute(sql)
        cursor.execute("EXPLAIN " + move[0], move[1])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)

    assert "Seq Scan on scheduler_stagedevent" not in plan and "scheduler_stagedevent_pkey" in plan
