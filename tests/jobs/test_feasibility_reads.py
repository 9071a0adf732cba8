"""The explain endpoint's "can it ever run?" reads the workers once per tick per process, not
once per request, and its query count does not grow with the cluster (issue 12)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.jobs.feasibility import worker_specs
from scheduler.board.read import forget as forget_board
from scheduler.models import Worker
from scheduler.tick.run import run_tick
from tests.personas import GIB, NOW_MS, make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db


def add_workers(start: int, n: int) -> None:
    now = timezone.now()
    Worker.objects.bulk_create(
        Worker(
            name=f"bulk-{i:05d}",
            cpu_millicores=4000,
            memory_bytes=16 * GIB,
            device_type="cpu",
            device_variant="",
            device_count=0,
            attributes={"zone": f"z{i % 7}"},
            last_heartbeat=now,
        )
        for i in range(start, start + n)
    )


def explain(client) -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/api/v1/jobs/alice/wide:explain")
    assert response.status_code == 200
    return response.json(), [q["sql"] for q in captured.captured_queries]


def worker_reads(sql: list[str]) -> int:
    return sum(1 for q in sql if 'FROM "scheduler_worker"' in q and "scheduler_task" not in q)


def test_explain_reads_the_workers_once_per_tick_and_its_queries_do_not_grow_with_them(alice):
    big = make_worker("big", cpu=16, memory_gib=64)
    start_running(make_job("/bob/hog", cpu=16, memory_gib=16), big)
    make_job("/alice/wide", cpu=8, memory_gib=8)  # only "big" has 8 cores, and bob holds it
    add_workers(0, 10)
    run_tick(NOW_MS)
    client = token_client(alice)

    cold, cold_sql = explain(client)
    warm, warm_sql = explain(client)
    assert worker_reads(cold_sql) == 1 and worker_reads(warm_sql) == 0
    assert cold["feasibility"] == warm["feasibility"]
    f = warm["feasibility"]
    assert (f["verdict"], f["matching_workers"], f["as_of_tick"]) == ("not_now", 1, warm["tick"])
    assert f["held_by"] == []  # alice's INTERACTIVE job may not evict bob's INTERACTIVE work
    assert f["held_by_others"] == {"tasks": 1, "users": ["bob"]}

    add_workers(10, 1500)
    forget_board()
    run_tick(NOW_MS + 1000)  # a newer tick: the workers are read again, once
    after, after_sql = explain(client)
    again, again_sql = explain(client)
    assert after["tick"] != warm["tick"] and after["feasibility"]["healthy_workers"] == 1511
    assert (len(after_sql), len(again_sql)) == (len(cold_sql), len(warm_sql))
    assert worker_reads(after_sql) == 1 and worker_reads(again_sql) == 0


def holder_counts(sql: list[str]) -> int:
    """The grouped count of who holds which workers: active tasks per (user, stamped band, kind)."""
    return sum(1 for q in sql if 'COUNT("scheduler_task"."id")' in q and '"scheduler_task"."band"' in q)


def test_who_holds_the_matching_workers_is_counted_once_per_tick_and_again_after_the_next(alice):
    big = make_worker("big", cpu=16, memory_gib=64)
    start_running(make_job("/bob/hog", cpu=16, memory_gib=16), big)
    make_job("/alice/wide", cpu=8, memory_gib=8)
    run_tick(NOW_MS)
    client = token_client(alice)

    first, first_sql = explain(client)
    second, second_sql = explain(client)
    assert (holder_counts(first_sql), holder_counts(second_sql)) == (1, 0)
    assert (
        first["feasibility"]["held_by_others"]
        == second["feasibility"]["held_by_others"]
        == {"tasks": 1, "users": ["bob"]}
    )

    start_running(make_job("/carol/small", cpu=1, memory_gib=1), big)  # carol now holds part of it too
    forget_board()
    run_tick(NOW_MS + 1000)
    after, after_sql = explain(client)
    assert holder_counts(after_sql) == 1
    assert after["feasibility"]["held_by_others"]["users"] == ["bob", "carol"]


def test_the_workers_kept_for_a_tick_share_one_device_per_shape():
    add_workers(0, 3)
    Worker.objects.bulk_create(
        Worker(
            name=f"tpu-{i}",
            cpu_millicores=8000,
            memory_bytes=16 * GIB,
            device_type="tpu",
            device_variant="v5p-8",
            device_count=4,
            attributes={},
            last_heartbeat=timezone.now(),
        )
        for i in range(2)
    )
    workers = {w.id: w for w in worker_specs()}
    assert workers["bulk-00000"].device is workers["bulk-00002"].device
    assert workers["tpu-0"].device is workers["tpu-1"].device
    assert workers["tpu-0"].device.count == 4 and workers["tpu-0"].device.variant == "v5p-8"
    assert workers["tpu-0"].device is not workers["bulk-00000"].device
