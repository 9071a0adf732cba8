"""The change stamp of new jobs, tasks and attempts, and of the tick's task writes, without a
PL/pgSQL call per row (PostgreSQL only).

Migration 0004 stamps every inserted job, task and attempt, and every update of a column the
tick reads, through a row trigger (``iris_stamp_change``, ``iris_stamp_job_change`` for jobs)
that sets ``change_xid`` to the writing transaction's id. The call costs about 2 µs a row on
the server: 60 ms of a first tick's 30,000-task UPDATE and as much again of its 30,000-attempt
COPY, and of a burst of submissions' job and task inserts.

- **Inserts**: the column's default is the writing transaction's id, the value the trigger set,
  and the triggers fire on updates only. Nothing inserts the column explicitly (it is not on
  the Django models, and the bulk writers name their columns).
- **The tick's task UPDATE** sets the stamp in its own ``SET`` list
  (``scheduler.tick.apply``); the task trigger's ``WHEN`` lets through only updates that leave
  the stamp as it was, so every other writer is stamped by the trigger as before.

- **A live job's flip** between pending and running (the tick's job write for every placement
  and preemption) keeps its stamp (migration 0026). The job trigger's ``WHEN`` now states that
  condition, so a flip calls no function at all (40-70 ms of a first tick's 10,000 flips), and
  every other job update calls the plain ``iris_stamp_change``; ``iris_stamp_job_change``,
  whose only other branch that was, is dropped.

The attempts' update trigger is unchanged. SQLite (the embedded default) has no change stamp.
"""

from importlib import import_module

from django.db import migrations

FLIP_MIGRATION = import_module("scheduler.migrations.0026_job_finished_state")
STAMP = "pg_current_xact_id()::text::bigint"
# Migration 0004's WATCHED columns, and 0026's for jobs.
TASK_WATCHED = 'job_id, "index", state, worker_id, band, preemption_count, attempt_count'
ATTEMPT_WATCHED = "task_id, worker_id, state, finished_at"
JOB_WATCHED = (
    'state, name, "user", band, parent_id, submitted_at_ms, root_submitted_at_ms, replicas, cpu_millicores, '
    "memory_bytes, device_type, device_variant, device_count, group_by, constraints, scheduling_deadline_ms, "
    "max_retries_preemption, max_retries_failure"
)
# A live job's flip, which keeps its stamp: only its state changed, from one live value to another.
LIVE_FLIP = (
    f"OLD.state IN ({FLIP_MIGRATION.LIVE}) AND NEW.state IN ({FLIP_MIGRATION.LIVE}) AND "
    f"({', '.join('NEW.' + c for c in FLIP_MIGRATION.OTHER_WATCHED)}) IS NOT DISTINCT FROM "
    f"({', '.join('OLD.' + c for c in FLIP_MIGRATION.OTHER_WATCHED)})"
)
# (table, watched columns, the function and WHEN of its update trigger before, and after)
TRIGGERS = (
    ("scheduler_task", TASK_WATCHED, "iris_stamp_change", "", "OLD.change_xid IS NOT DISTINCT FROM NEW.change_xid"),
    ("scheduler_attempt", ATTEMPT_WATCHED, "iris_stamp_change", "", ""),
    ("scheduler_job", JOB_WATCHED, "iris_stamp_job_change", "iris_stamp_change", f"NOT ({LIVE_FLIP})"),
)


def trigger(table: str, events: str, function: str, when: str = "") -> list[str]:
    condition = f"WHEN ({when}) " if when else ""
    return [
        f"DROP TRIGGER {table}_stamp_change ON {table}",
        f"CREATE TRIGGER {table}_stamp_change BEFORE {events} ON {table} FOR EACH ROW {condition}"
        f"EXECUTE FUNCTION {function}()",
    ]


FORWARD = []
BACKWARD = []
for table, watched, function_before, function_after, when in TRIGGERS:
    FORWARD += [
        f"ALTER TABLE {table} ALTER COLUMN change_xid SET DEFAULT {STAMP}",
        *trigger(table, f"UPDATE OF {watched}", function_after or function_before, when),
    ]
    BACKWARD += [
        f"ALTER TABLE {table} ALTER COLUMN change_xid SET DEFAULT 0",
        *trigger(table, f"INSERT OR UPDATE OF {watched}", function_before),
    ]
# The job trigger's function (migration 0026), whose WHEN now holds its one condition.
FORWARD.append("DROP FUNCTION iris_stamp_job_change()")
BACKWARD.insert(0, FLIP_MIGRATION.FORWARD[0])


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0030_preemption_victim_user_lost_work")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
