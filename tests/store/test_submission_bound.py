"""A budget identity's bound on its unfinished tasks (``SubmissionBound``, PostgreSQL only): the
cap's rule reads it, with the jobs written since, instead of every live job of the identity,
and says the same as counting them (issue 26, pgsub37)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from scheduler.jobs.submit import submit_job, submit_jobs
from scheduler.models import Job, SubmissionBound, Task
from scheduler.store import submission_rows
from tests.personas import submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def unfinished(user: str, adding: int = 1, cap: int = 100) -> int:
    """What the rules read as ``user``'s unfinished tasks, asking to add ``adding`` under ``cap``."""
    with transaction.atomic():
        reads = submission_rows.rule_reads(user, "/nobody/none", count_up_to=cap + 1, adding=adding, at=timezone.now())
    return reads.unfinished


def test_a_submission_leaves_its_identitys_tasks_up_to_its_job(alice, ada):
    first = submit(alice, "first", replicas=3)
    assert SubmissionBound.objects.filter(user="alice").values_list("tasks", "last_job_id").get() == (3, first.pk)
    child = submit_job(ada, {"name": "child", "parent": "/alice/first", "command": ["true"], "replicas": 2})
    assert SubmissionBound.objects.filter(user="alice").values_list("tasks", "last_job_id").get() == (5, child.pk)
    assert not SubmissionBound.objects.filter(user="ada").exists()  # the child bills to alice


def test_the_rules_read_the_bound_and_the_jobs_written_since_not_the_live_jobs(alice):
    submit(alice, "one", replicas=2)
    # A bound above the live jobs' replicas is what the rules read while it leaves room...
    SubmissionBound.objects.filter(user="alice").update(tasks=7)
    assert unfinished("alice") == 7
    # ...with the replicas of the jobs written after it (here by a batch, which keeps no bound).
    submit_jobs(alice, [{"name": "b1", "command": ["true"], "replicas": 4}])
    assert unfinished("alice") == 11
    # One that leaves no room sends the rule back to the live jobs (2 + 4 replicas).
    assert unfinished("alice", adding=90) == 6


def test_without_a_bound_the_live_jobs_are_read(alice):
    submit_jobs(alice, [{"name": f"b{i}", "command": ["true"], "replicas": 2} for i in range(3)])
    assert not SubmissionBound.objects.exists()
    assert unfinished("alice") == 6


def test_finished_tasks_leave_the_bound_once_it_no_longer_leaves_room(alice, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 10
    submit(alice, "wide", replicas=8)
    Task.objects.filter(job__name="/alice/wide", index__lt=6).update(state="succeeded")
    # The bound (8) leaves no room for 3 more: the rule counts 2 unfinished tasks, and the bound
    # kept is 2 + 3.
    submit(alice, "more", replicas=3)
    assert SubmissionBound.objects.get(user="alice").tasks == 5
    submit(alice, "fits", replicas=5)
    with pytest.raises(Exception, match="would exceed the limit of 10"):
        submit(alice, "over", replicas=1)
    assert Job.objects.filter(user="alice").count() == 3


def test_jobs_a_batch_wrote_after_the_bound_count_towards_the_cap(alice, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 10
    submit(alice, "single", replicas=4)
    submit_jobs(alice, [{"name": "swept", "command": ["true"], "replicas": 4}])
    with pytest.raises(Exception, match="'alice' has 8 unfinished tasks; 3 more would exceed the limit of 10"):
        submit(alice, "over", replicas=3)
    submit(alice, "fits", replicas=2)
    assert SubmissionBound.objects.get(user="alice").tasks == 10
