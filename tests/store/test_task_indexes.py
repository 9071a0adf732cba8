"""The task table's state indexes hold only live tasks (migration 0035), and every reader of
them still finds its rows through one.

The tick's placement UPDATE is never heap-only (it changes the state and the indexed change
stamp), so each index whose condition a new row version matches costs one more entry per
placement. The pending and the active tasks therefore have an index each, and finished tasks
none: a placement writes only the active one, a task's end neither.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.core.types import ACTIVE_STATES, TaskState
from scheduler.execution.queries import workers_with_load
from scheduler.models import Task
from scheduler.store.cluster_rows import LIVE_TASK_MATCH, TASK_SELECT
from tests.personas import make_job, make_worker

pytestmark = pytest.mark.django_db

TASK = Task._meta.db_table


def task_index_definitions() -> dict[str, str]:
    """{index name: its definition as the database holds it} of the task table's indexes."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [TASK])
        else:
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s", [TASK])
        return {name: definition or "" for name, definition in cursor.fetchall()}


def test_the_task_tables_state_indexes_hold_only_pending_or_active_tasks():
    indexes = task_index_definitions()
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TASK)
    by_state = {name: c["columns"] for name, c in constraints.items() if c["index"] and "state" in (c["columns"] or [])}
    assert by_state == {}, "no index leads with or holds the state: finished tasks would be in it"
    pending, active = indexes["task_pending"], indexes["task_active_by_worker"]
    assert "job_id" in pending and f"'{TaskState.PENDING.value}'" in pending.split("WHERE", 1)[1]
    condition = active.split("WHERE", 1)[1]
    assert "worker_id" in active and all(f"'{s.value}'" in condition for s in ACTIVE_STATES)
    assert f"'{TaskState.PENDING.value}'" not in condition
    assert not any(name in indexes for name in ("scheduler_t_state_f7a5aa_idx", "scheduler_t_worker__2f3cd0_idx"))


def test_the_models_and_the_migrations_agree():
    """A model's index without its migration (or the reverse) fails here, as in a deploy."""
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)


def plan_of(sql: str, params=()) -> str:
    """PostgreSQL's plan with sequential scans priced out: a few rows would be read whole
    whatever indexes there are; with them off, a statement no index can answer still shows a
    sequential scan."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres
def test_the_ticks_whole_read_of_live_tasks_uses_the_two_partial_indexes():
    """``state IN`` all four live states implies neither index's condition: behind a year of
    finished tasks it read the whole table."""
    plan = plan_of(f"{TASK_SELECT} WHERE {LIVE_TASK_MATCH} ORDER BY t.id")
    assert f"Seq Scan on {TASK}" not in plan, plan
    assert "task_pending" in plan and "task_active_by_worker" in plan, plan


@pytest.mark.postgres
def test_a_workers_load_is_counted_from_its_active_tasks_index():
    worker = make_worker("w1", cpu=8, memory_gib=32)
    make_job("/bob/train", cpu=1, memory_gib=1)
    with CaptureQueriesContext(connection) as captured:
        assert workers_with_load().get(pk=worker.pk).active_tasks == 0
    (query,) = captured.captured_queries
    plan = plan_of(query["sql"])
    assert f"Seq Scan on {TASK}" not in plan, plan
    assert "task_active_by_worker" in plan, plan
