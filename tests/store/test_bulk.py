"""Set-based writes (``scheduler.store.bulk``): the same rows on either database.

``insert_rows`` takes COPY on PostgreSQL and ``executemany`` on SQLite; both write exactly the
rows given, including NULLs, empty strings, the characters COPY's text format escapes, and
timestamps, and either counts as one statement.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.models import Attempt, DispatchIntent
from scheduler.store import bulk
from scheduler.tick.apply import INTENT_COLUMNS, NEW_ATTEMPT_COLUMNS
from tests.personas import make_job, make_worker

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 12, 2, 11, 0, 0, 123456, tzinfo=UTC)
AWKWARD = "tab\there, newline\nthere, back\\slash, \\N, quote ' \" and ünïcode"


def test_insert_rows_writes_exactly_the_given_rows_as_one_statement():
    job = make_job("/alice/bulk", replicas=2)
    worker = make_worker("w-bulk")
    first, second = job.tasks.order_by("index")
    columns = INTENT_COLUMNS  # the columns the tick writes intents with
    rows = [
        (first.pk, 1, "start", worker.pk, "pending", "assigned", 0, "", WHEN),
        (second.pk, 1, "stop", None, "pending", AWKWARD, 3, AWKWARD, WHEN),
    ]
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        bulk.insert_rows(DispatchIntent._meta.db_table, columns, rows)
    assert len(captured.captured_queries) == 1
    written = DispatchIntent.objects.order_by("task_id").values_list(*(name for name, _ in columns))
    assert [tuple(row) for row in written] == rows


def test_insert_rows_then_update_rows_in_one_transaction():
    job = make_job("/alice/bulk-update")
    worker = make_worker("w-bulk-update")
    task = job.tasks.get()
    with transaction.atomic():
        bulk.insert_rows(
            Attempt._meta.db_table,
            NEW_ATTEMPT_COLUMNS,
            [(task.pk, 1, worker.pk, "assigned", 2, WHEN, "")],
        )
        with bulk.pipeline():
            bulk.update_rows(
                Attempt._meta.db_table,
                [("task_id", "bigint"), ("number", "integer")],
                [("state", "text"), ("error", "text")],
                [(task.pk, 1, "preempted", AWKWARD)],
            )
    attempt = Attempt.objects.get()
    assert (attempt.worker_id, attempt.state, attempt.error, attempt.band, attempt.created_at) == (
        worker.pk,
        "preempted",
        AWKWARD,
        2,
        WHEN,
    )


def test_update_rows_writes_timestamps_exactly_whatever_their_zone_and_fraction():
    job = make_job("/alice/bulk-times", replicas=3)
    worker = make_worker("w-bulk-times")
    tasks = list(job.tasks.order_by("index"))
    times = [
        WHEN,
        datetime(2026, 12, 2, 11, 0, 0, tzinfo=UTC),  # no fraction: written without one
        datetime(2026, 12, 2, 16, 30, 0, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ]
    with transaction.atomic():
        bulk.insert_rows(
            Attempt._meta.db_table,
            NEW_ATTEMPT_COLUMNS,
            [(task.pk, 1, worker.pk, "assigned", 2, WHEN, "") for task in tasks],
        )
        with bulk.pipeline():
            bulk.update_rows(
                Attempt._meta.db_table,
                [("task_id", "bigint"), ("number", "integer")],
                [("finished_at", "timestamptz")],
                [(task.pk, 1, at) for task, at in zip(tasks, times, strict=True)],
            )
    written = Attempt.objects.order_by("task_id").values_list("finished_at", flat=True)
    assert list(written) == times


def test_insert_returning_writes_every_column_and_returns_the_new_ids_by_key():
    from scheduler.models import Job

    columns = bulk.model_columns(Job)
    template = {attname: None for _, _, attname in columns} | {
        "user": "alice",
        "band": 2,
        "state": "pending",
        "depth": 1,
        "replicas": 1,
        "cpu_millicores": 1000,
        "memory_bytes": 1 << 30,
        "device_type": "cpu",
        "device_variant": "",
        "device_count": 0,
        "max_retries_preemption": 100,
        "max_retries_failure": 0,
        "system_reason": "",
        "route": "",
        "submission_argv": [],
        "request": {"nested": {"deep": [1, "two", None]}},
        "created_at": WHEN,
    }
    rows = [
        {
            **template,
            "name": f"/alice/r{i}",
            "submitted_at_ms": i,
            "root_submitted_at_ms": i,
            "command": ["python", AWKWARD, str(i)],
            "constraints": [{"key": "zone", "op": "in", "value": ["a", "b"]}],
        }
        for i in range(3)
    ]
    with CaptureQueriesContext(connection) as queries:
        returned = bulk.insert_returning(
            Job._meta.db_table,
            [(c, t) for c, t, _ in columns],
            [tuple(r[a] for _, _, a in columns) for r in rows],
            returning=("name", "id"),
        )
    assert len([q for q in queries.captured_queries if q["sql"].startswith("INSERT")]) == 1
    ids = dict(returned)
    assert set(ids) == {f"/alice/r{i}" for i in range(3)}
    for name, pk in ids.items():
        job = Job.objects.get(pk=pk)
        assert job.name == name
        assert job.command == ["python", AWKWARD, name[-1]]
        assert job.request == {"nested": {"deep": [1, "two", None]}}
        assert job.constraints == [{"key": "zone", "op": "in", "value": ["a", "b"]}]
        assert (job.parent_id, job.group_by, job.created_at) == (None, None, WHEN)


@pytest.mark.postgres
def test_update_rows_visits_the_rows_in_key_order_and_still_finds_each_by_position():
    """On PostgreSQL the payload is sorted by the keys before the join (the tick's rows come in
    a set's order; in the table's order a first tick's task UPDATE takes about a third less of
    the server's CPU), and a row keyed by its locked position is still found by a Tid scan."""
    from scheduler.models import Task
    from scheduler.tick.apply import TASK_WRITE_COLUMNS, current_task_states
    from scheduler.store.cluster_rows import CHANGE_STAMP

    job = make_job("/alice/bulk-order", replicas=4)
    worker = make_worker("w-bulk-order")
    pks = list(job.tasks.order_by("index").values_list("pk", flat=True))
    with transaction.atomic():
        _, positions = current_task_states(pks)
        rows = [(positions[pk], pk, "assigned", worker.pk, 2, 0, 1, WHEN) for pk in reversed(pks)]
        keys = [("ctid", "tid"), ("id", "bigint")]
        with CaptureQueriesContext(connection) as captured:
            bulk.update_rows(Task._meta.db_table, keys, TASK_WRITE_COLUMNS, rows, postgresql_set=CHANGE_STAMP)
        (statement,) = [q["sql"] for q in captured.captured_queries]
        with connection.cursor() as cursor:
            # As on a cluster's table (four rows are cheaper to hash whole, or to find by the
            # primary key, than by position): the tick's UPDATE finds its rows by a Tid scan.
            for kind in ("seqscan", "hashjoin", "mergejoin", "indexscan", "bitmapscan"):
                cursor.execute(f"SET LOCAL enable_{kind} = off")
            cursor.execute("EXPLAIN (COSTS OFF) " + statement)
            plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Sort Key: (((r.value ->> 0))::tid), (((r.value ->> 1))::bigint)" in plan, plan
    assert "Tid Scan on scheduler_task" in plan, plan
    written = Task.objects.filter(pk__in=pks).values_list("state", "worker_id", "attempt_count")
    assert set(written) == {("assigned", worker.pk, 1)}
