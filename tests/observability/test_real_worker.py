"""A real Celery worker with beat (on Redis) ticks in its own process; this process's /metrics
shows its counts, and its JSON log lines carry the tick's fields."""

from __future__ import annotations

import json

import pytest

from scheduler.models import TickRecord
from tests.personas import make_job, make_worker
from tests.integration.test_celery_beat import run_worker_with_beat
from tests.observability.conftest import Scrape


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_ticks_counted_in_the_worker_process_are_exposed_by_the_web_process(tmp_path, client):
    def scrape() -> Scrape:
        return Scrape(client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())

    before = scrape()
    make_worker("w1", cpu=8, memory_gib=32)
    make_job("/alice/train", replicas=2)

    log = run_worker_with_beat(tmp_path, 2, IRIS_LOG_FORMAT="json")

    after = scrape()
    ran = after.value("iris_ticks_total", outcome="ran") - before.value("iris_ticks_total", outcome="ran")
    assert ran == TickRecord.objects.count() >= 2
    assert (
        after.value("iris_assignments_total", band="interactive")
        - before.value("iris_assignments_total", band="interactive")
        == 2
    )
    records = []
    for line in log.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # Celery's start-up banner is printed, not logged
    ticks = [r for r in records if isinstance(r, dict) and r.get("logger") == "scheduler.tick.run" and "tick" in r]
    assert len(ticks) >= 2 and ticks[0]["assigned"] == 2
    assert not any(r.get("logger") == "celery.beat" for r in records if isinstance(r, dict)), "beat chatter is DEBUG"
