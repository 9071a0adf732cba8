"""Job.request: the submission as validated, kept for every job (the console sends no argv)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0008_worker_credentials")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="request",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
