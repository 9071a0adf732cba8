"""Change tracking for the tick's incremental snapshot (PostgreSQL only).

Every insert of a job, task or attempt, and every update that sets a column the tick reads,
stamps the row's ``change_xid`` with the id of the writing transaction, whichever code path
wrote it (a trigger, so no write can forget). The tick reads only rows whose ``change_xid`` is
at least the oldest transaction still running at its previous read
(``scheduler.store.cluster_rows``); anything committed since then has an id at least that large. Deleting or truncating any of the three tables bumps ``iris_snapshot_epoch`` in the same
transaction, which makes the next tick read everything again.

The column is not on the Django models: nothing but the snapshot reader uses it, and SQLite (the
embedded default) reads the whole cluster every tick instead.
"""

from django.db import migrations

TABLES = ("scheduler_job", "scheduler_task", "scheduler_attempt")
# The columns scheduler.store.cluster_rows reads: an update of any of them is a change. Updates of
# other columns only (a job's route stamp, a task's updated_at) are not, and skip the trigger.
WATCHED = {
    "scheduler_job": (
        "name", "state", '"user"', "band", "parent_id", "submitted_at_ms", "root_submitted_at_ms", "replicas",
        "cpu_millicores", "memory_bytes", "device_type", "device_variant", "device_count", "group_by",
        "constraints", "scheduling_deadline_ms", "max_retries_preemption", "max_retries_failure",
    ),
    "scheduler_task": ("job_id", '"index"', "state", "worker_id", "band", "preemption_count", "attempt_count"),
    "scheduler_attempt": ("task_id", "worker_id", "state", "finished_at"),
}

FORWARD = [
    """
    CREATE FUNCTION iris_stamp_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.change_xid := pg_current_xact_id()::text::bigint;
        RETURN NEW;
    END $$
    """,
    "CREATE TABLE iris_snapshot_epoch (id integer PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL)",
    "INSERT INTO iris_snapshot_epoch VALUES (1, 0)",
    """
    CREATE FUNCTION iris_bump_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE iris_snapshot_epoch SET epoch = epoch + 1 WHERE id = 1;
        RETURN NULL;
    END $$
    """,
]
for table in TABLES:
    FORWARD += [
        f"ALTER TABLE {table} ADD COLUMN change_xid bigint NOT NULL DEFAULT 0",
        f"UPDATE {table} SET change_xid = pg_current_xact_id()::text::bigint",
        f"CREATE INDEX {table}_change_xid ON {table} (change_xid)",
        f"CREATE TRIGGER {table}_stamp_change BEFORE INSERT OR UPDATE OF {', '.join(WATCHED[table])} "
        f"ON {table} FOR EACH ROW EXECUTE FUNCTION iris_stamp_change()",
        f"CREATE TRIGGER {table}_bump_epoch AFTER DELETE OR TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION iris_bump_epoch()",
    ]

BACKWARD = []
for table in TABLES:
    BACKWARD += [
        f"DROP TRIGGER {table}_bump_epoch ON {table}",
        f"DROP TRIGGER {table}_stamp_change ON {table}",
        f"ALTER TABLE {table} DROP COLUMN change_xid",
    ]
BACKWARD += ["DROP FUNCTION iris_bump_epoch()", "DROP TABLE iris_snapshot_epoch", "DROP FUNCTION iris_stamp_change()"]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements:
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0003_cloud_backends")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
