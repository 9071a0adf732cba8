"""The submission path's own row: each budget identity's bound on its unfinished tasks.

It lives beside ``scheduler/models.py`` (which re-exports it, so Django and the migrations find
it there) to keep that module under the layout test's 700 lines. Only Django is imported:
``scheduler.models`` imports this module.
"""

from __future__ import annotations

from django.db import models


class SubmissionBound(models.Model):
    """An upper bound of one budget identity's unfinished tasks, as its last single submission
    on PostgreSQL left it (``scheduler.store.submission_rows``): ``tasks`` bounds the unfinished
    tasks of its jobs whose id is at most ``last_job_id``. The jobs written after that one are
    added to it (their replicas), so the cap's rule reads those jobs, not every live job of the
    identity: each submission's read was one heap page a live job, a millisecond of the
    database's CPU at a thousand (issue 26, pgsub37).

    A bound it stays because every job of an identity is written under the identity's
    submission lock (so none commits below ``last_job_id`` later), a job's tasks never come back
    from a terminal state, and a finished job never lives again; a bound that is too high only
    sends the rule back to reading the live jobs. Written by the submission's own statement,
    under the same lock."""

    user = models.CharField(max_length=150, primary_key=True)
    tasks = models.BigIntegerField()
    last_job_id = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.user}: at most {self.tasks} unfinished tasks up to job {self.last_job_id}"
