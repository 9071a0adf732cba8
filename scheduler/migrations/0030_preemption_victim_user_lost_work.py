"""Preemption events carry their victim's user and the work the eviction lost.

The preemption history filtered by user walked every event joined to its task and job (2.5 s
with a year of history), and the fairness page's lost work joined each of a day's events to its
task, job and latest started attempt (137 ms on the server). The tick now writes both with the
event; this fills them for the events already kept, with what the page computed from the joins:
the victim job's resource value (``scheduler.core.budget.resource_value``: 1000 per accelerator
chip, 1 per whole GiB, 5 per whole core) × the time from the start of the victim's latest attempt
started by then to the eviction, in milliseconds (0 if none had started).
"""

from django.db import migrations, models

VALUE = (
    "(1000 * (CASE WHEN j.device_type IN ('gpu', 'tpu') THEN j.device_count ELSE 0 END)"
    " + j.memory_bytes / 1073741824 + 5 * (j.cpu_millicores / 1000))"
)
STARTED = (
    "(SELECT a.started_at FROM scheduler_attempt a WHERE a.task_id = e.victim_id AND a.started_at IS NOT NULL"
    " AND a.started_at <= e.created_at ORDER BY a.number DESC LIMIT 1)"
)
RAN_MS = {
    "postgresql": f"EXTRACT(EPOCH FROM (e.created_at - {STARTED})) * 1000",
    "sqlite": f"(julianday(e.created_at) - julianday({STARTED})) * 86400000",
}


def fill_sql(vendor: str) -> str:
    ran = RAN_MS.get(vendor, RAN_MS["postgresql"])
    return (
        "UPDATE scheduler_preemptionevent AS e SET"
        ' victim_user = (SELECT j."user" FROM scheduler_task t JOIN scheduler_job j ON j.id = t.job_id'
        "  WHERE t.id = e.victim_id),"
        f" lost_point_ms = COALESCE((SELECT CAST(ROUND({VALUE} * {ran}) AS bigint) FROM scheduler_task t"
        "  JOIN scheduler_job j ON j.id = t.job_id WHERE t.id = e.victim_id), 0)"
    )


def fill(apps, schema_editor):
    schema_editor.execute(fill_sql(schema_editor.connection.vendor))


# On PostgreSQL, the window's events carry what the lost-work sum and the per-user counts read:
# an index-only scan (a day's 20,000 events: 14-23 ms on a loaded host, against 42-58 ms through
# the heap). SQLite has no covering indexes; it reads the plain created_at index.
COVERING = "preemption_recent_lost"


def add_covering_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX {COVERING} ON scheduler_preemptionevent (created_at) INCLUDE (victim_user, lost_point_ms)"
        )


def drop_covering_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX {COVERING}")


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0029_worker_change_tracking")]

    operations = [
        migrations.AddField(
            model_name="preemptionevent",
            name="victim_user",
            field=models.CharField(default="", max_length=150),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="preemptionevent",
            name="lost_point_ms",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="preemptionevent",
            index=models.Index(fields=["victim_user", "-created_at"], name="preemption_victim_user"),
        ),
        migrations.RunPython(add_covering_index, drop_covering_index),
    ]
