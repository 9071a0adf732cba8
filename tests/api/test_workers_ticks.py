"""Workers, ticks run on demand, and what-if (which must write nothing)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.models import Attempt, AuditEntry, Job, Task, TickRecord, UserBudget, Worker
from scheduler.tick.run import acquire_lease, release_lease
from tests.api.conftest import error_of
from tests.personas import GIB, make_worker, run_tasks, submit

# --- workers --------------------------------------------------------------------------------------


def register(client, **body):
    return client.post("/api/v1/workers/", {"name": "tpu-0", "cpu": 96, "memory": "320Gi", **body}, format="json")


def test_registering_a_worker_creates_it_then_updates_it(as_olivia):
    response = register(
        as_olivia,
        device={"type": "tpu", "variant": "v5p-8", "count": 4},
        attributes={"tpu-name": "slice-a", "tpu-worker-id": 0},
        backend="tpu",
    )
    assert response.status_code == 201
    worker = response.json()
    assert (worker["cpu"], worker["memory_bytes"], worker["device"]) == (
        96.0,
        320 * GIB,
        {"type": "tpu", "variant": "v5p-8", "count": 4},
    )
    assert (worker["attributes"], worker["backend"], worker["healthy"]) == (
        {"tpu-name": "slice-a", "tpu-worker-id": "0"},
        "tpu",
        True,
    )

    Worker.objects.filter(name="tpu-0").update(draining=True, healthy=False)
    again = register(as_olivia, cpu=64)
    assert again.status_code == 200
    assert (again.json()["cpu"], again.json()["healthy"], again.json()["draining"]) == (64.0, True, True)
    assert Worker.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cpu": None}, "cpu"),
        ({"memory": "lots"}, "memory"),
        ({"name": "a:b"}, "name"),
        ({"name": ""}, "name"),
        ({"device": {"type": "gpu"}}, "device.variant"),
        ({"attributes": ["zone"]}, "attributes"),
        ({"backend": "k 8 s"}, "backend"),
    ],
)
def test_worker_registration_is_validated(as_olivia, body, field):
    response = register(as_olivia, **body)
    assert response.status_code == 400
    assert error_of(response)["details"]["field"] == field


def test_heartbeat_records_time_and_health(as_olivia):
    make_worker("w1")
    Worker.objects.filter(name="w1").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    response = as_olivia.post("/api/v1/workers/w1:heartbeat", {"healthy": False}, format="json")
    assert response.status_code == 200
    worker = Worker.objects.get()
    assert worker.healthy is False
    assert timezone.now() - worker.last_heartbeat < timedelta(seconds=5)
    assert as_olivia.post("/api/v1/workers/w1:heartbeat", {}, format="json").json()["healthy"] is True


def test_draining_stops_new_placements(as_olivia, as_alice, alice):
    make_worker("w1")
    assert as_olivia.post("/api/v1/workers/w1:drain").json()["draining"] is True
    submit(alice, "train")
    as_olivia.post("/api/v1/ticks/")
    assert Task.objects.get().state == "pending"


@pytest.mark.parametrize("verb", ["heartbeat", "drain"])
def test_unknown_workers_are_not_found(as_olivia, verb):
    response = as_olivia.post(f"/api/v1/workers/nobody:{verb}", {}, format="json")
    assert (response.status_code, error_of(response)["code"]) == (404, "NOT_FOUND")


def test_workers_list_with_active_tasks_in_a_fixed_number_of_queries(as_alice, alice, django_assert_num_queries):
    for i in range(12):
        run_tasks(submit(alice, f"j{i}", replicas=2), make_worker(f"w{i:02}"), 1)
    make_worker("w99")
    # Authentication (1: the token and its user), the count, the page of workers, their active tasks: 4, whatever the size.
    with django_assert_num_queries(4):
        page = as_alice.get("/api/v1/workers/?page_size=5").json()
    assert page["count"] == 13
    assert [(w["name"], w["active_tasks"]) for w in page["results"]][:2] == [("w00", 1), ("w01", 1)]
    last = as_alice.get("/api/v1/workers/?page_size=5&page=3").json()
    assert ([(w["name"], w["active_tasks"]) for w in last["results"]], last["next"]) == (
        [("w10", 1), ("w11", 1), ("w99", 0)],
        None,
    )


def test_workers_list_is_paginated_like_the_other_lists(as_alice):
    for i in range(3):
        make_worker(f"w{i}")
    page = as_alice.get("/api/v1/workers/?page_size=2").json()
    assert (page["count"], [w["name"] for w in page["results"]]) == (3, ["w0", "w1"])
    assert page["next"].endswith("page=2&page_size=2") and page["previous"] is None
    beyond = as_alice.get("/api/v1/workers/?page=9")
    assert (beyond.status_code, error_of(beyond)["code"]) == (404, "NOT_FOUND")


# --- ticks ----------------------------------------------------------------------------------------


def test_running_a_tick_places_pending_work_and_is_listed(as_olivia, alice):
    make_worker("w1")
    submit(alice, "train", replicas=2)
    response = as_olivia.post("/api/v1/ticks/")
    assert response.status_code == 200
    outcome = response.json()
    assert (outcome["assigned"], outcome["preempted"], outcome["expired"]) == (2, 0, 0)
    assert set(Task.objects.values_list("state", flat=True)) == {"assigned"}
    ticks = as_olivia.get("/api/v1/ticks/").json()
    assert [t["id"] for t in ticks] == [outcome["tick_id"]]
    assert (ticks[0]["pending"], ticks[0]["assigned"]) == (2, 2)


def test_a_tick_while_another_holds_the_lease_is_failed_precondition(as_olivia):
    assert acquire_lease("someone-else", timezone.now())
    try:
        response = as_olivia.post("/api/v1/ticks/")
    finally:
        release_lease("someone-else")
    assert (response.status_code, error_of(response)["code"]) == (409, "FAILED_PRECONDITION")
    assert not TickRecord.objects.exists()


def test_ticks_list_is_newest_first_and_limited(as_alice):
    now = timezone.now()
    for i in range(5):
        TickRecord.objects.create(started_at=now - timedelta(seconds=10 * (5 - i)), now_ms=i, duration_ms=float(i))
    ticks = as_alice.get("/api/v1/ticks/?limit=2").json()
    assert [t["now_ms"] for t in ticks] == [4, 3]
    assert as_alice.get("/api/v1/ticks/?limit=0").status_code == 400


# --- what-if --------------------------------------------------------------------------------------


def what_if(client, **body):
    return client.post("/api/v1/what-if/", {"name": "probe", **body}, format="json")


def counts():
    return (
        Job.objects.count(),
        Task.objects.count(),
        Attempt.objects.count(),
        TickRecord.objects.count(),
        AuditEntry.objects.count(),
    )


def test_what_if_answers_where_the_job_would_go_and_writes_nothing(as_alice):
    make_worker("w1", cpu=8)
    before = counts()
    answer = what_if(as_alice, cpu=4).json()
    feasibility = answer.pop("feasibility")
    # No tick has run: the answer is a decision over the whole live snapshot, and says so.
    assert answer.pop("basis") == {"source": "live", "tick": None, "tick_at": None}
    assert answer | {"spend": 0} == {
        "accepted": True,
        "never": False,
        "error": None,
        "job": "/alice/probe",
        "requested_band": "interactive",
        "effective_band": "interactive",
        "spend": 0,
        "limit": 1000,
        "position": None,
        "would_place": True,
        "worker": "w1",
        "would_preempt": [],
        "pending_reason": None,
        "estimated_start": None,
        "estimated_start_text": "would start at the next tick",
    }
    assert (feasibility["verdict"], feasibility["matching_workers"]) == ("fits", 1)
    assert counts() == before


def test_what_if_says_a_job_bigger_than_any_worker_can_never_run(as_alice):
    make_worker("w1", cpu=8)
    answer = what_if(as_alice, cpu=1000).json()
    assert answer["would_place"] is False
    assert answer["pending_reason"]["code"] == "never_fits"
    assert answer["pending_reason"]["text"].startswith(
        "Never fits on the cluster as it is; 1,000 cores per task: 0 healthy workers have it"
    )
    f = answer["feasibility"]
    assert f["verdict"] == "never"
    assert [(r["kind"], r["workers_alone"], r["workers_with_previous"]) for r in f["requirements"]] == [
        ("cpu", 0, 0),
        ("memory", 1, 0),
    ]
    assert f["largest_worker"]["cpu_millicores"] == 8000


def test_what_if_reports_the_preemption_it_would_cause(as_alice, bob):
    make_worker("w1", cpu=8)
    run_tasks(submit(bob, "sweep", priority="batch", cpu=8), Worker.objects.get())
    answer = what_if(as_alice, cpu=8).json()
    assert (answer["would_place"], answer["worker"], answer["would_preempt"]) == (True, "w1", ["/bob/sweep/0"])
    assert Task.objects.get().state == "running"


def test_what_if_reports_a_rejection_and_why(as_alice):
    answer = what_if(as_alice, priority="production").json()
    assert answer["accepted"] is False
    assert answer["error"]["code"] == "PERMISSION_DENIED"
    assert (answer["would_place"], answer["worker"]) == (False, None)


def test_what_if_for_an_over_budget_user_shows_the_effective_band_and_position(as_alice, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    run_tasks(submit(alice, "big", cpu=8, memory="16Gi"), make_worker("w1", cpu=8))
    answer = what_if(as_alice, cpu=8).json()
    assert (answer["effective_band"], answer["spend"], answer["limit"]) == ("batch", 56, 10)
    assert (answer["would_place"], answer["position"]) == (False, 1)
    assert answer["pending_reason"]


def test_admins_ask_what_if_as_another_user_under_that_users_rules(as_ada, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=1000, max_band=Band.BATCH)
    answer = what_if(as_ada, user="alice").json()
    assert (answer["accepted"], answer["error"]["code"], answer["requested_band"]) == (
        False,
        "PERMISSION_DENIED",
        "interactive",
    )
    assert "Budget identity 'alice'" in answer["error"]["message"]
    assert what_if(as_ada, user="alice", priority="batch").json()["job"] == "/alice/probe"


def test_what_if_for_an_unknown_user_is_not_found(as_ada):
    assert error_of(what_if(as_ada, user="nobody"))["code"] == "NOT_FOUND"


def test_what_if_with_a_malformed_spec_is_invalid_argument(as_alice):
    response = what_if(as_alice, memory="lots")
    assert (response.status_code, error_of(response)["details"]["field"]) == (400, "memory")


# --- what-if after a tick: answered from the tick's basis ----------------------------------------


def test_after_a_tick_what_if_places_on_the_capacity_the_tick_left_free(as_alice, bob):
    from scheduler.tick.run import run_tick

    make_worker("w1", cpu=8)
    submit(bob, "big", cpu=6)
    tick = run_tick().tick_id
    before = counts()
    too_big = what_if(as_alice, cpu=4).json()
    fits = what_if(as_alice, cpu=2).json()
    assert too_big["basis"]["source"] == "tick" and too_big["basis"]["tick"] == tick
    assert (too_big["would_place"], too_big["worker"], too_big["position"]) == (False, None, 1)
    assert too_big["pending_reason"]["tick"] == tick and f"tick {tick}" in too_big["pending_reason"]["text"]
    assert too_big["feasibility"]["verdict"] == "not_now"
    assert too_big["feasibility"]["held_by"] == []  # bob's work is in its own band: it may not evict it
    assert too_big["feasibility"]["held_by_others"] == {"tasks": 1, "users": ["bob"]}
    assert (fits["would_place"], fits["worker"], fits["pending_reason"]) == (True, "w1", None)
    assert counts() == before


def test_after_a_tick_what_if_gives_the_place_the_job_then_gets(as_alice, alice, bob):
    from scheduler.board.read import queue_index
    from scheduler.tick.run import run_tick

    make_worker("w1", cpu=1)
    run_tasks(submit(bob, "running", cpu=1), Worker.objects.get())  # bob spends, alice does not
    for name in ("a", "b"):
        submit(alice, name, cpu=1)
        submit(bob, f"waits-{name}", cpu=1)
    run_tick()
    answer = what_if(as_alice, name="probe", cpu=1).json()
    submit(alice, "probe", cpu=1)
    run_tick()
    queued = queue_index().locate("/alice/probe/0")
    assert (answer["position"], answer["pending_reason"]["band_pending"]) == (queued.position, queued.band_count)
    assert answer["position"] == 5


def test_after_a_tick_what_if_reports_the_preemption_it_would_cause(as_alice, bob):
    from scheduler.tick.run import run_tick

    make_worker("w1", cpu=8)
    submit(bob, "sweep", priority="batch", cpu=8)
    run_tick()
    Task.objects.update(state="running")  # as its agent reports (only running work is preempted)
    answer = what_if(as_alice, cpu=8).json()
    assert answer["basis"]["source"] == "tick"
    assert (answer["would_place"], answer["worker"], answer["would_preempt"]) == (True, "w1", ["/bob/sweep/0"])
    assert what_if(as_alice, cpu=8, priority="batch").json()["would_preempt"] == []  # BATCH never preempts


def test_after_a_tick_what_if_says_a_job_bigger_than_any_worker_can_never_run(as_alice):
    from scheduler.tick.run import run_tick

    make_worker("w1", cpu=8)
    run_tick()
    answer = what_if(as_alice, cpu=1000).json()
    assert (answer["would_place"], answer["pending_reason"]["code"], answer["feasibility"]["verdict"]) == (
        False,
        "never_fits",
        "never",
    )
    assert answer["feasibility"]["largest_worker"]["cpu_millicores"] == 8000


def test_what_if_after_a_tick_runs_the_same_queries_on_a_larger_cluster(as_alice, bob, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.tick.run import run_tick

    def measured(n: int) -> int:
        for i in range(n):
            make_worker(f"w{n}-{i}", cpu=1)
            submit(bob, f"j{n}-{i}", cpu=1, replicas=2)
        run_tick()
        what_if(as_alice, cpu=1)  # the first answer after a tick parses the basis (one more query)
        with CaptureQueriesContext(connection) as captured:
            assert what_if(as_alice, cpu=1).status_code == 200
        return len(captured)

    assert measured(2) == measured(20)
