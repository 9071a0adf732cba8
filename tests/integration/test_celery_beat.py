"""A real Celery worker with beat, on Redis, runs ticks that commit to the test database."""

from __future__ import annotations

import pytest
import redis

from scheduler.models import Task, TickRecord
from tests.conftest import REDIS_TEST_URL
from tests.integration.subprocesses import project_env, start, stop, wait_for
from tests.personas import make_job, make_worker

pytestmark = pytest.mark.e2e


def run_worker_with_beat(tmp_path, ticks: int, *worker_args: str, **env: str) -> str:
    """Run a real Celery worker with beat (ticks every second) until ``ticks`` ticks committed;
    returns its log."""
    redis.Redis.from_url(REDIS_TEST_URL).flushdb()
    log_path = tmp_path / "celery.log"
    worker = start(
        [
            "-m",
            "celery",
            "-A",
            "iris_web",
            "worker",
            "--beat",
            "--pool",
            "solo",
            *worker_args,
            "--loglevel",
            "INFO",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        project_env(tmp_path, IRIS_TICK_SECONDS="1", **env),
        log_path,
    )
    try:
        ticked = wait_for(lambda: TickRecord.objects.count() >= ticks, timeout=90)
    finally:
        stop(worker)
    log = log_path.read_text()
    assert ticked, f"no ticks committed; worker log:\n{log[-4000:]}"
    return log


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_celery_beat_runs_ticks_that_commit_assignments(tmp_path):
    make_worker("w1", cpu=8, memory_gib=32)
    job = make_job("/alice/train", replicas=2)
    log = run_worker_with_beat(tmp_path, 2)
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"assigned"}
    assert "scheduler.tick" in log


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_ticks_routed_to_their_own_queue_run_in_the_process_that_keeps_the_rows(tmp_path, settings):
    """``IRIS_TICK_QUEUE``: beat sends ticks to that queue, a worker serving only it runs them,
    and (on PostgreSQL) every tick after its first reads only the rows that changed."""
    make_worker("w1", cpu=8, memory_gib=32)
    job = make_job("/alice/train", replicas=2)
    log = run_worker_with_beat(tmp_path, 3, "-Q", "tick", IRIS_TICK_QUEUE="tick")
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"assigned"}
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        assert "reading everything" in log and "reading changes" in log, log[-4000:]
    else:
        assert "reading changes" not in log
