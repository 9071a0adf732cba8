"""The queue explanation becomes compressed JSON bytes (``CompressedJSONField``). The stored
explanation is only a cache of the newest tick's; the next tick writes it again."""

from django.db import migrations

import scheduler.models


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0004_change_tracking")]

    operations = [
        migrations.RemoveField(model_name="tickrecord", name="explanation"),
        migrations.AddField(
            model_name="tickrecord",
            name="explanation",
            field=scheduler.models.CompressedJSONField(blank=True, null=True),
        ),
    ]
