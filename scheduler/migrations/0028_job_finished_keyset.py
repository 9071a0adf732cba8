"""The state sort's index for finished jobs (scheduler.jobs.listing._state_rows): at 2,000,000
finished jobs an ungrouped sort by state sorted the whole table (3.4 s a page)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0027_notifications"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["finished_state", "id"], name="job_finished_keyset"),
        ),
    ]
