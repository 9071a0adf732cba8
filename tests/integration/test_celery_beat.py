"""A real Celery worker with beat, on Redis, runs ticks that commit to the test database."""

from __future__ import annotations

import pytest
import redis

from scheduler.models import Task, TickRecord
from tests.conftest import REDIS_TEST_URL
from tests.db.factories import make_job, make_worker
from tests.integration.subprocesses import project_env, start, stop, wait_for


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_celery_beat_runs_ticks_that_commit_assignments(tmp_path):
    redis.Redis.from_url(REDIS_TEST_URL).flushdb()
    make_worker("w1", cpu=8, memory_gib=32)
    job = make_job("/alice/train", replicas=2)
    log_path = tmp_path / "celery.log"
    worker = start(
        ["-m", "celery", "-A", "iris_web", "worker", "--beat", "--pool", "solo", "--loglevel", "INFO",
         "--schedule", str(tmp_path / "beat-schedule")],
        project_env(tmp_path, IRIS_TICK_SECONDS="1"),
        log_path,
    )
    try:
        ticked = wait_for(lambda: TickRecord.objects.count() >= 2, timeout=90)
    finally:
        stop(worker)
    log = log_path.read_text()
    assert ticked, f"no ticks committed; worker log:\n{log[-4000:]}"
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"assigned"}
    assert "scheduler.tick" in log


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_ticks_routed_to_their_own_queue_run_in_the_process_that_keeps_the_rows(tmp_path, settings):
    """``IRIS_TICK_QUEUE``: beat sends ticks to that queue, a worker serving only it runs them,
    and (on PostgreSQL) every tick after its first reads only the rows that changed."""
    redis.Redis.from_url(REDIS_TEST_URL).flushdb()
    make_worker("w1", cpu=8, memory_gib=32)
    job = make_job("/alice/train", replicas=2)
    log_path = tmp_path / "celery.log"
    worker = start(
        ["-m", "celery", "-A", "iris_web", "worker", "--beat", "--pool", "solo", "-Q", "tick", "--loglevel", "INFO",
         "--schedule", str(tmp_path / "beat-schedule")],
        project_env(tmp_path, IRIS_TICK_SECONDS="1", IRIS_TICK_QUEUE="tick"),
        log_path,
    )
    try:
        ticked = wait_for(lambda: TickRecord.objects.count() >= 3, timeout=90)
    finally:
        stop(worker)
    log = log_path.read_text()
    assert ticked, f"no ticks committed; worker log:\n{log[-4000:]}"
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"assigned"}
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        assert "reading everything" in log and "reading changes" in log, log[-4000:]
    else:
        assert "reading changes" not in log
