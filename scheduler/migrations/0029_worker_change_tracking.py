"""The workers' change stamp, so a tick reads only the workers that changed (PostgreSQL only).

Migration 0004 stamps jobs, tasks and attempts with the writing transaction's id
(``change_xid``); the tick read every worker row every tick instead (10,000 rows: 15-25 ms of a
tick that found nothing else to do). Workers get the same stamp now, set on insert and on an
update that changes a column the tick reads (``scheduler.store.cluster_rows.WORKER_SELECT``).
A heartbeat sets ``healthy`` and ``last_heartbeat`` every few seconds: the trigger's ``WHEN``
compares old and new values, so a heartbeat that changes no value the tick reads leaves the
stamp (and with it every index) alone. Deleting or truncating workers bumps
``iris_snapshot_epoch``, as for the other three tables: the next tick reads everything.

SQLite (the embedded default) reads every worker every tick, as before.
"""

from django.db import migrations

# The columns scheduler.store.cluster_rows reads of a worker.
WATCHED = (
    "name", "healthy", "draining", "cpu_millicores", "memory_bytes", "device_type", "device_variant",
    "device_count", "attributes",
)

FORWARD = [
    "ALTER TABLE scheduler_worker ADD COLUMN change_xid bigint NOT NULL DEFAULT 0",
    "UPDATE scheduler_worker SET change_xid = pg_current_xact_id()::text::bigint",
    "CREATE INDEX scheduler_worker_change_xid ON scheduler_worker (change_xid)",
    "CREATE TRIGGER scheduler_worker_stamp_insert BEFORE INSERT ON scheduler_worker "
    "FOR EACH ROW EXECUTE FUNCTION iris_stamp_change()",
    f"CREATE TRIGGER scheduler_worker_stamp_change BEFORE UPDATE ON scheduler_worker FOR EACH ROW "
    f"WHEN (({', '.join('OLD.' + c for c in WATCHED)}) IS DISTINCT FROM ({', '.join('NEW.' + c for c in WATCHED)})) "
    "EXECUTE FUNCTION iris_stamp_change()",
    "CREATE TRIGGER scheduler_worker_bump_epoch AFTER DELETE OR TRUNCATE ON scheduler_worker "
    "FOR EACH STATEMENT EXECUTE FUNCTION iris_bump_epoch()",
]
BACKWARD = [
    "DROP TRIGGER scheduler_worker_bump_epoch ON scheduler_worker",
    "DROP TRIGGER scheduler_worker_stamp_change ON scheduler_worker",
    "DROP TRIGGER scheduler_worker_stamp_insert ON scheduler_worker",
    "ALTER TABLE scheduler_worker DROP COLUMN change_xid",
]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0028_job_finished_keyset")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
