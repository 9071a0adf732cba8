"""Preemption events carry their victim's job.

The preemption history's "most preempted jobs" grouped the newest 10,000 events by their victim
task's job: a task lookup per event (40 ms on the server beside a year of history, the largest
part of `/preemptions/`). The tick now writes the victim's job with the event; this fills it for
the events already kept, and puts it (with the victim task) in the covering index of the recent
events on PostgreSQL, so the grouping is an index-only scan of the window.
"""

import django.db.models.deletion
from django.db import migrations, models

FILL = (
    "UPDATE scheduler_preemptionevent AS e SET"
    " victim_job_id = (SELECT t.job_id FROM scheduler_task t WHERE t.id = e.victim_id)"
)
COVERING = "preemption_recent_lost"
OLD_COVERING = f"CREATE INDEX {COVERING} ON scheduler_preemptionevent (created_at) INCLUDE (victim_user, lost_point_ms)"
# Keyed by (created_at, id), the order the history pages and the window's edge use.
NEW_COVERING = (
    f"CREATE INDEX {COVERING} ON scheduler_preemptionevent (created_at, id)"
    " INCLUDE (victim_user, lost_point_ms, victim_job_id, victim_id)"
)


def fill(apps, schema_editor):
    schema_editor.execute(FILL)


def covering(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX IF EXISTS {COVERING}")
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0032_task_starving_index")]

    operations = [
        migrations.AddField(
            model_name="preemptionevent",
            name="victim_job",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="scheduler.job",
                db_index=False,
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="preemptionevent",
            name="victim_job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="scheduler.job",
                db_index=False,
            ),
        ),
        migrations.RunPython(covering(NEW_COVERING), covering(OLD_COVERING)),
    ]
