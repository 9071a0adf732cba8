"""What a what-if reads of the newest tick (issue 14): who holds the matching workers comes from
the tick's basis (no grouped count of the task table per request), equal to the live count
right after the tick; the job shape's analysis is made once per shape per tick."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.core.bands import Band
from scheduler.core.feasibility import analyse_job, rank_holders
from scheduler.core.types import Constraint, ConstraintOp, Device, DeviceType, JobSpec, Resources
from scheduler.jobs import whatif as whatif_module
from scheduler.jobs.feasibility import holders_of
from scheduler.models import Task, compress_json, decompress_json
from scheduler.board.read import whatif_basis
from scheduler.tick.run import run_tick
from tests.personas import GIB, NOW_MS, make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db


def what_if(client, **body) -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.post("/api/v1/what-if/", {"name": "probe", **body}, format="json")
    assert response.status_code == 200
    return response.json(), [q["sql"] for q in captured.captured_queries]


def holder_counts(sql: list[str]) -> int:
    """The grouped count of who holds which workers: active tasks per (user, stamped band, kind)."""
    return sum(1 for q in sql if 'COUNT("scheduler_task"."id")' in q and '"scheduler_task"."band"' in q)


def held(answer: dict) -> list[dict]:
    return answer["feasibility"]["held_by"]


def test_what_if_names_who_holds_its_workers_from_the_tick_without_counting_the_task_table(alice):
    big = make_worker("big", cpu=16, memory_gib=64)
    wide = make_worker("wide", cpu=16, memory_gib=64)
    make_worker("small", cpu=1, memory_gib=64)
    start_running(make_job("/bob/hog", cpu=16, memory_gib=16), big)
    start_running(make_job("/carol/sweep", cpu=16, memory_gib=16), wide)
    make_job("/dave/tiny", cpu=1, memory_gib=1)  # the tick places it on "small"
    tick = run_tick(NOW_MS).tick_id
    assert Task.objects.get(job__name="/dave/tiny").worker.name == "small"
    client = token_client(alice)

    eight, eight_sql = what_if(client, cpu=8, memory="1Gi")  # matches big and wide only
    one, one_sql = what_if(client, cpu=1, memory="1Gi")  # matches every healthy worker
    assert (holder_counts(eight_sql), holder_counts(one_sql)) == (0, 0)
    for answer in (eight, one):
        assert (answer["basis"]["tick"], answer["feasibility"]["verdict"], answer["would_place"]) == (
            tick,
            "not_now",
            False,
        )
    # INTERACTIVE work may not evict INTERACTIVE work: "Held by" is empty, the rest summed apart.
    assert held(eight) == held(one) == []
    assert eight["feasibility"]["held_by_others"] == {"tasks": 2, "users": ["bob", "carol"]}
    assert one["feasibility"]["held_by_others"] == {"tasks": 3, "users": ["bob", "carol", "dave"]}  # the tick's own
    # placement counts too


def spec(cpu: int, mem_gib: int = 1, device: Device = Device(), zone: str | None = None) -> JobSpec:
    return JobSpec(
        id="/x/probe",
        user="x",
        band=Band.INTERACTIVE,
        parent=None,
        submitted_at_ms=NOW_MS,
        root_submitted_at_ms=NOW_MS,
        resources=Resources(cpu * 1000, mem_gib * GIB, device),
        constraints=(Constraint("zone", ConstraintOp.EQ, zone),) if zone else (),
    )


def test_the_tick_basis_holder_counts_equal_the_live_count_right_after_the_tick_that_preempted(alice):
    workers = [make_worker(f"w{i}", cpu=cpu, memory_gib=32, zone=f"z{i % 2}") for i, cpu in enumerate((4, 8, 4, 4))]
    gpu = make_worker("gpu", cpu=8, memory_gib=32, device=("gpu", "a100", 4))
    start_running(make_job("/bob/low", band=Band.BATCH, cpu=4), workers[0])
    start_running(make_job("/bob/mid", band=Band.PRODUCTION, cpu=8), workers[1], band=Band.BATCH)
    start_running(make_job("/carol/run", cpu=4), workers[2])
    start_running(make_job("/erin/run", cpu=4), workers[3])
    start_running(make_job("/erin/gpu", cpu=8, device=("gpu", "a100", 2)), gpu)
    make_job("/dave/urgent", band=Band.PRODUCTION, cpu=4)  # only by preempting bob's BATCH-stamped work
    make_job("/dave/more", cpu=2, replicas=3)
    assert run_tick(NOW_MS).preempted >= 1
    basis = whatif_basis()
    shapes = [
        spec(1),
        spec(4),
        spec(8),
        spec(12),
        spec(64),
        spec(1, zone="z1"),
        spec(1, device=Device(DeviceType.GPU, "a100", 2)),
    ]
    for shape in shapes:
        analysis = analyse_job(shape, basis.workers, (), basis.attributes)
        for band in (Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH):
            assert rank_holders(basis.holder_counts(analysis.matching_ids), shape, band) == holders_of(
                analysis, shape, band
            ), shape


def test_a_job_shape_is_analysed_once_per_tick_and_again_after_the_next(alice, monkeypatch):
    calls = []
    real = whatif_module.analyse_job
    monkeypatch.setattr(whatif_module, "analyse_job", lambda *a, **k: calls.append(a[0].resources) or real(*a, **k))
    worker = make_worker("w1", cpu=8)
    start_running(make_job("/bob/hog", cpu=6), worker)
    run_tick(NOW_MS)
    client = token_client(alice)

    first, _ = what_if(client, cpu=4, memory="1Gi")
    again, _ = what_if(client, name="other", cpu=4, memory="1Gi")  # another name, the same shape
    assert len(calls) == 1
    assert (first["would_place"], first["feasibility"]) == (again["would_place"], again["feasibility"])
    fits, _ = what_if(client, cpu=2, memory="1Gi")
    assert len(calls) == 2 and (fits["would_place"], fits["worker"]) == (True, "w1")

    run_tick(NOW_MS + 1000)
    what_if(client, cpu=4, memory="1Gi")
    assert len(calls) == 3


def test_stored_json_that_orjson_refuses_reads_back():
    assert decompress_json(compress_json({"x": float("inf"), "n": 2**70})) == {"x": float("inf"), "n": 2**70}
    assert decompress_json(compress_json({"workers": [["w1", 1, True]]})) == {"workers": [["w1", 1, True]]}
