"""Final reports racing on PostgreSQL (issue 13 §4): two tasks of one job end at the same moment.

Under load, a job's two final reports arrived 30 ms apart and each one's completion check
counted the other task as still active (each transaction sees only its own update), so the job
stayed RUNNING forever. Here two threads, each with its own connection, deliver the reports
and meet at a rendezvous right after their completion check, before either commits: without a
lock on the job row both reach it, as under load; with it, the second waits for the first's
commit (the rendezvous sees it blocked on a lock and lets the first go on).
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus
from scheduler.core.bands import Band
from scheduler.execution import attempts
from scheduler.execution.attempts import apply_reports
from scheduler.models import Job
from tests.personas import make_job, make_worker, run_tasks, start_running
from tests.races import RENDEZVOUS_SECONDS, Rendezvous

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def race_final_reports(
    monkeypatch,
    job: Job,
    statuses: tuple[AttemptStatus, AttemptStatus],
    workers: tuple[str, str] = ("w1", "w1"),
    meet_before_releasing_the_gang: bool = False,
) -> None:
    """Deliver the final reports of ``job``'s two tasks from two threads at once, meeting after
    the completion check (or, for a gang, just before the siblings are released)."""
    rendezvous = Rendezvous()
    names = {}
    if meet_before_releasing_the_gang:
        real_release = attempts._release_gang

        def meet_then_release(*args, **kwargs):
            rendezvous.wait(names[threading.get_ident()])
            real_release(*args, **kwargs)

        monkeypatch.setattr(attempts, "_release_gang", meet_then_release)
    else:
        real_finish_jobs = attempts.finish_jobs

        def finish_jobs_then_meet(job_pks, now, **kwargs):
            real_finish_jobs(job_pks, now, **kwargs)
            rendezvous.wait(names[threading.get_ident()])

        monkeypatch.setattr(attempts, "finish_jobs", finish_jobs_then_meet)
    tasks = list(job.tasks.order_by("index"))
    ready = threading.Barrier(2)
    errors: list[BaseException] = []

    def report(name: str, task, status: AttemptStatus, worker: str) -> None:
        names[threading.get_ident()] = name
        try:
            rendezvous.register(name)
            ready.wait(timeout=RENDEZVOUS_SECONDS)
            apply_reports(
                [
                    AttemptReport(
                        AttemptRef(task.pk, 1),
                        status,
                        exit_code=0 if status is AttemptStatus.SUCCEEDED else 1,
                        worker=worker,
                    )
                ]
            )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            rendezvous.done.add(name)
            connection.close()

    threads = [
        threading.Thread(target=report, args=(f"report{i}", task, status, worker))
        for i, (task, status, worker) in enumerate(zip(tasks, statuses, workers))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RENDEZVOUS_SECONDS * 2)
    assert not errors, errors


def test_two_final_reports_at_once_finish_the_job(monkeypatch):
    w1 = make_worker("w1", cpu=8)
    job = make_job("/alice/pair", band=Band.INTERACTIVE, replicas=2)
    run_tasks(job, w1)

    race_final_reports(monkeypatch, job, (AttemptStatus.SUCCEEDED, AttemptStatus.SUCCEEDED))

    job.refresh_from_db()
    assert set(job.tasks.values_list("state", flat=True)) == {"succeeded"}
    assert job.state == "succeeded" and job.finished_at is not None


def test_a_success_and_a_failure_at_once_fail_the_job(monkeypatch):
    w1 = make_worker("w1", cpu=8)
    job = make_job("/alice/pair", band=Band.INTERACTIVE, replicas=2)
    run_tasks(job, w1)

    race_final_reports(monkeypatch, job, (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED))

    job.refresh_from_db()
    assert sorted(job.tasks.values_list("state", flat=True)) == ["failed", "succeeded"]
    assert job.state == "failed"


def test_two_gang_members_failing_at_once_end_the_gang_once(monkeypatch):
    # Each failure ends the other member too (a gang runs whole or not at all). Without the job
    # lock, each report held its own task and then waited for its sibling's: a deadlock, which
    # PostgreSQL broke by failing one of the reports.
    hosts = [make_worker(f"w{i}", cpu=8, pool="a") for i in (1, 2)]
    job = make_job("/alice/gang", band=Band.INTERACTIVE, replicas=2, group_by="pool")
    for index, host in enumerate(hosts):
        start_running(job, host, index=index)

    race_final_reports(
        monkeypatch,
        job,
        (AttemptStatus.FAILED, AttemptStatus.FAILED),
        workers=("w1", "w2"),
        meet_before_releasing_the_gang=True,
    )

    job.refresh_from_db()
    assert sorted(job.tasks.values_list("state", flat=True)) == ["cosched_failed", "failed"]
    assert job.state == "failed"
