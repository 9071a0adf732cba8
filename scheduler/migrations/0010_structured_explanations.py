"""Issue 12: a tick records how many tasks it left pending (the queue it stored), beside how
many were pending when it started. The stored explanation's new shape (reasons as records,
``"version": 2``) needs no schema change: it is a cache of the newest tick, written again by the
next one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0009_job_request"),
    ]

    operations = [
        migrations.AddField(
            model_name="tickrecord",
            name="left_pending",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
