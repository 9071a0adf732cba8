"""Each budget identity's bound on its unfinished tasks (``SubmissionBound``; issue 26, branch
pgsub37): the cap's rule of a single submission on PostgreSQL reads it, with the replicas of the
jobs written since, instead of every live job of the identity (a heap page each, on every
submission), and the submission's own statement keeps it up to its job. No rows to fill: an
identity without one is read as before, and its next single submission writes it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0037_intent_indexes_without_fresh"),
    ]

    operations = [
        migrations.CreateModel(
            name="SubmissionBound",
            fields=[
                ("user", models.CharField(max_length=150, primary_key=True, serialize=False)),
                ("tasks", models.BigIntegerField()),
                ("last_job_id", models.BigIntegerField()),
            ],
        ),
    ]
