""" "Held by" names only the work a job may evict (issue 23): a strictly lower band and, by the
preemption pass's own rule (``core.preemption.may_evict``), the same kind of work (a CPU task
evicts only CPU work); the rest is summed apart, with "only their finishing frees room". The
same in the API's explain, the job page and the what-if."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.core.bands import Band
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def held_cluster():
    """Three full 8-core workers: alice's BATCH TPU work on a TPU host, bob's BATCH CPU work,
    dave's INTERACTIVE CPU work; carol's INTERACTIVE 8-core CPU job waits for room."""
    tpu = make_worker("tpu-1", cpu=8, memory_gib=64, device=("tpu", "v5p", 4))
    cpu = make_worker("c-1", cpu=8, memory_gib=64)
    peer = make_worker("c-2", cpu=8, memory_gib=64)
    start_running(make_job("/alice/tpu", band=Band.BATCH, cpu=8, device=("tpu", "v5p", 4)), tpu)
    start_running(make_job("/bob/cpu", band=Band.BATCH, cpu=8), cpu)
    start_running(make_job("/dave/cpu", band=Band.INTERACTIVE, cpu=8), peer)
    return make_job("/carol/wait", band=Band.INTERACTIVE, cpu=8)


def test_explain_lists_only_holders_the_job_may_evict(held_cluster, alice):
    from tests.personas import make_user

    carol = make_user("carol")
    f = token_client(carol).get("/api/v1/jobs/carol/wait:explain").json()["feasibility"]

    assert (f["verdict"], f["matching_workers"]) == ("not_now", 3)
    assert f["held_by"] == [{"user": "bob", "band": "batch", "tasks": 1, "preemptible": True}]
    assert f["held_by_others"] == {"tasks": 2, "users": ["alice", "dave"]}


def test_the_job_page_says_only_their_finishing_frees_room_when_nothing_is_evictable(alice):
    from tests.personas import make_user

    tpu = make_worker("tpu-1", cpu=8, memory_gib=64, device=("tpu", "v5p", 4))
    start_running(make_job("/alice/tpu", band=Band.BATCH, cpu=8, device=("tpu", "v5p", 4)), tpu)
    make_job("/carol/wait", band=Band.INTERACTIVE, cpu=8)
    client = Client()
    client.force_login(make_user("carol"))

    html = client.get("/jobs/carol/wait/").content.decode()

    assert 'id="held-by"' not in html and "preemptible" not in html
    others = html[html.index('id="held-by-others"') :]
    assert "1 task of alice that this job may not evict" in others
    assert "only their finishing frees room" in others


def test_what_if_on_the_ticks_basis_lists_only_holders_it_may_evict(alice):
    tpu = make_worker("tpu-1", cpu=8, memory_gib=64, device=("tpu", "v5p", 4))
    cpu = make_worker("c-1", cpu=8, memory_gib=64)
    start_running(make_job("/bob/tpu", band=Band.BATCH, cpu=8, device=("tpu", "v5p", 4)), tpu)
    start_running(make_job("/dave/cpu", band=Band.INTERACTIVE, cpu=8), cpu)
    run_tick(NOW_MS)

    answer = (
        token_client(alice).post("/api/v1/what-if/", {"name": "probe", "cpu": 8, "memory": "1Gi"}, format="json").json()
    )
    tpu_probe = (
        token_client(alice)
        .post(
            "/api/v1/what-if/",
            {"name": "probe", "cpu": 8, "memory": "1Gi", "device": {"type": "tpu", "variant": "v5p", "count": 4}},
            format="json",
        )
        .json()
    )

    assert answer["basis"]["source"] == "tick"
    assert answer["feasibility"]["verdict"] == "not_now" and answer["would_preempt"] == []
    assert answer["feasibility"]["held_by"] == []
    assert answer["feasibility"]["held_by_others"] == {"tasks": 2, "users": ["bob", "dave"]}
    # A TPU job of a higher band may evict bob's BATCH TPU work, and the what-if's trial does.
    assert tpu_probe["would_preempt"] == ["/bob/tpu/0"]
