"""Set-based writes (``scheduler.store.bulk``): the same rows on either database.

``insert_rows`` takes COPY on PostgreSQL and ``executemany`` on SQLite; both write exactly the
rows given, including NULLs, empty strings, the characters COPY's text format escapes, and
timestamps, and either counts as one statement.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.models import Attempt, DispatchIntent
from scheduler.store import bulk
from tests.personas import make_job, make_worker

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 12, 2, 11, 0, 0, 123456, tzinfo=UTC)
AWKWARD = "tab\there, newline\nthere, back\\slash, \\N, quote ' \" and ünïcode"


def test_insert_rows_writes_exactly_the_given_rows_as_one_statement():
    job = make_job("/alice/bulk", replicas=2)
    worker = make_worker("w-bulk")
    first, second = job.tasks.order_by("index")
    columns = [("task_id", "bigint"), ("attempt_number", "integer"), ("kind", "text"), ("worker_id", "bigint"),
               ("state", "text"), ("reason", "text"), ("tries", "integer"), ("last_error", "text"),
               ("created_at", "timestamptz")]
    rows = [
        (first.pk, 1, "start", worker.pk, "pending", "assigned", 0, "", WHEN),
        (second.pk, 1, "stop", None, "pending", AWKWARD, 3, AWKWARD, WHEN),
    ]
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        bulk.insert_rows(DispatchIntent._meta.db_table, columns, rows)
    assert len(captured.captured_queries) == 1
    written = DispatchIntent.objects.order_by("task_id").values_list(
        "task_id", "attempt_number", "kind", "worker_id", "state", "reason", "tries", "last_error", "created_at"
    )
    assert [tuple(row) for row in written] == rows


def test_insert_rows_then_update_rows_in_one_transaction():
    job = make_job("/alice/bulk-update")
    worker = make_worker("w-bulk-update")
    task = job.tasks.get()
    with transaction.atomic():
        bulk.insert_rows(
            Attempt._meta.db_table,
            [("task_id", "bigint"), ("number", "integer"), ("worker_id", "bigint"), ("state", "text"),
             ("band", "smallint"), ("created_at", "timestamptz"), ("error", "text")],
            [(task.pk, 1, worker.pk, "assigned", 2, WHEN, "")],
        )
        with bulk.pipeline():
            bulk.update_rows(
                Attempt._meta.db_table, [("task_id", "bigint"), ("number", "integer")],
                [("state", "text"), ("error", "text")], [(task.pk, 1, "preempted", AWKWARD)],
            )
    attempt = Attempt.objects.get()
    assert (attempt.worker_id, attempt.state, attempt.error, attempt.band, attempt.created_at) == (
        worker.pk, "preempted", AWKWARD, 2, WHEN
    )
