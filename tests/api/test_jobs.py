"""Reading and cancelling jobs; the queue, explanations and preemption history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.jobs.cancel import cancel_job
from scheduler.board.read import forget as forget_board
from scheduler.jobs.submit import submit_job
from scheduler.models import Attempt, Job, PreemptionEvent, Task, UserBudget
from tests.api.conftest import HELD, NO_WORKERS, SHORT_OF_CPU, error_of, make_tick
from tests.personas import make_worker, run_tasks, submit

# Authentication (token + user) is one query; a list view must stay within a fixed budget. The
# jobs list adds three for the effective band (live spend, budget rows, active uplift grants).
LIST_QUERIES = 9


# --- list and detail ------------------------------------------------------------------------------


def test_jobs_list_newest_first_with_task_counts(as_bob, alice, bob):
    first = submit(alice, "a", replicas=3)
    submit(bob, "b", priority="batch")
    run_tasks(first, make_worker(), 1)
    page = as_bob.get("/api/v1/jobs/").json()
    assert page["count"] == 2
    assert [j["id"] for j in page["results"]] == ["/bob/b", "/alice/a"]
    assert page["results"][1]["task_counts"] == {"pending": 2, "running": 1}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("user=alice", ["/alice/a"]),
        ("band=batch", ["/bob/b"]),
        ("state=running", ["/alice/a"]),
        ("user=bob&band=interactive", []),
    ],
)
def test_jobs_list_filters(as_alice, alice, bob, query, expected):
    run_tasks(submit(alice, "a"), make_worker())
    submit(bob, "b", priority="batch")
    assert [j["id"] for j in as_alice.get(f"/api/v1/jobs/?{query}").json()["results"]] == expected


@pytest.mark.parametrize("query", ["band=urgent", "state=sleeping", "page=0", "page=abc"])
def test_jobs_list_rejects_bad_filters(as_alice, query):
    response = as_alice.get(f"/api/v1/jobs/?{query}")
    assert response.status_code in (400, 404)
    assert error_of(response)["code"] in ("INVALID_ARGUMENT", "NOT_FOUND")


def test_jobs_list_paginates(as_alice, alice):
    for i in range(7):
        submit(alice, f"j{i}")
    page = as_alice.get("/api/v1/jobs/?page_size=3&page=3").json()
    assert page["count"] == 7
    assert [j["id"] for j in page["results"]] == ["/alice/j0"]
    # An old page-number link answers; its links are keyset cursors (tests/api/test_job_list_pages.py).
    assert page["next"] is None and "cursor=" in page["previous"]
    assert [j["id"] for j in as_alice.get(page["previous"]).json()["results"]] == [
        "/alice/j3",
        "/alice/j2",
        "/alice/j1",
    ]


@pytest.mark.parametrize("jobs", [3, 30])
def test_jobs_list_runs_a_fixed_number_of_queries(as_alice, alice, jobs, django_assert_max_num_queries):
    worker = make_worker()
    for i in range(jobs):
        run_tasks(submit(alice, f"j{i}", replicas=3), worker, 1)
    with django_assert_max_num_queries(LIST_QUERIES):
        assert as_alice.get("/api/v1/jobs/").status_code == 200


def test_job_detail_has_tasks_and_attempts(as_bob, alice):
    job = submit(alice, "train", replicas=2, command=["python", "train.py"])
    run_tasks(job, make_worker("w1"), 1)
    detail = as_bob.get("/api/v1/jobs/alice/train").json()
    assert detail["id"] == "/alice/train"
    assert detail["command"] == ["python", "train.py"]
    first, second = detail["tasks"]
    assert (first["id"], first["state"], first["worker"], first["band"]) == (
        "/alice/train/0",
        "running",
        "w1",
        "interactive",
    )
    assert [(a["number"], a["worker"], a["state"], a["finished_at"]) for a in first["attempts"]] == [
        (1, "w1", "running", None)
    ]
    assert (second["state"], second["band"], second["attempts"]) == ("pending", None, [])


def test_job_detail_accepts_the_leading_slash_form_and_lists_children(as_alice, alice):
    submit(alice, "train")
    submit(alice, "eval", parent="/alice/train")
    assert as_alice.get("/api/v1/jobs//alice/train").json()["children"] == ["/alice/train/eval"]
    assert as_alice.get("/api/v1/jobs/alice/train/eval").json()["parent"] == "/alice/train"


@pytest.mark.parametrize("tasks", [2, 40])
def test_job_detail_runs_a_fixed_number_of_queries(as_alice, alice, tasks, django_assert_max_num_queries):
    job = submit(alice, "train", replicas=tasks)
    run_tasks(job, make_worker(), tasks // 2)
    with django_assert_max_num_queries(LIST_QUERIES + 1):
        assert as_alice.get("/api/v1/jobs/alice/train").status_code == 200


@pytest.mark.parametrize("path", ["jobs/alice/none", "jobs/alice", "jobs/a b/c", "jobs/alice/train:frobnicate"])
def test_unknown_jobs_are_not_found(as_alice, alice, path):
    submit(alice, "train")
    response = as_alice.get(f"/api/v1/{path}")
    assert response.status_code == 404
    assert error_of(response)["code"] == "NOT_FOUND"


# --- cancel ---------------------------------------------------------------------------------------


def test_cancel_kills_unfinished_tasks_and_descendants(as_alice, alice, ada):
    job = submit(alice, "train", replicas=3)
    child = submit(alice, "eval", parent="/alice/train", replicas=2)
    grandchild = submit_job(ada, {"command": ["true"], "name": "probe", "parent": "/alice/train/eval"})
    worker = make_worker("w1")
    run_tasks(job, worker, 1)
    run_tasks(child, worker, 1)

    response = as_alice.post("/api/v1/jobs/alice/train:cancel")
    assert response.status_code == 200
    assert response.json() == {
        "id": "/alice/train",
        "state": "killed",
        "killed_jobs": ["/alice/train", "/alice/train/eval", "/alice/train/eval/probe"],
        "killed_tasks": 6,
    }
    assert set(Job.objects.values_list("state", flat=True)) == {"killed"}
    assert all(j.finished_at for j in Job.objects.all())
    assert set(Task.objects.values_list("state", flat=True)) == {"killed"}
    assert not Task.objects.filter(worker__isnull=False).exists()
    # The worker still runs the processes: their attempts hold capacity until it confirms.
    attempts = Attempt.objects.all()
    assert [(a.state, a.finished_at) for a in attempts] == [("killed", None), ("killed", None)]
    assert attempts[0].error == "Killed by alice"
    assert grandchild.pk


def test_cancelling_a_child_leaves_the_parent_running(as_alice, alice):
    submit(alice, "train")
    submit(alice, "eval", parent="/alice/train")
    assert as_alice.post("/api/v1/jobs/alice/train/eval:cancel").json()["killed_jobs"] == ["/alice/train/eval"]
    assert Job.objects.get(name="/alice/train").state == "pending"


def test_cancelling_a_finished_job_is_failed_precondition(as_alice, alice):
    submit(alice, "train")
    as_alice.post("/api/v1/jobs/alice/train:cancel")
    response = as_alice.post("/api/v1/jobs/alice/train:cancel")
    assert response.status_code == 409
    assert error_of(response)["code"] == "FAILED_PRECONDITION"


def test_cancelling_someone_elses_job_is_permission_denied_and_changes_nothing(as_bob, alice):
    submit(alice, "train")
    response = as_bob.post("/api/v1/jobs/alice/train:cancel")
    assert response.status_code == 403
    assert error_of(response)["code"] == "PERMISSION_DENIED"
    assert Job.objects.get().state == "pending"


def test_cancelling_a_missing_job_is_not_found(as_alice):
    assert error_of(as_alice.post("/api/v1/jobs/alice/none:cancel"))["code"] == "NOT_FOUND"


# --- the queue ------------------------------------------------------------------------------------


@pytest.fixture
def queued(alice, bob):
    """Three pending tasks of alice, two of bob (one BATCH), explained by the newest tick."""
    submit(alice, "train", replicas=3)
    submit(bob, "sweep", priority="batch")
    submit(bob, "probe")
    return make_tick(
        {
            "/alice/train/0": (Band.INTERACTIVE, 1, NO_WORKERS),
            "/bob/probe/0": (Band.INTERACTIVE, 2, NO_WORKERS),
            "/alice/train/1": (Band.INTERACTIVE, 3, NO_WORKERS),
            "/alice/train/2": (Band.BATCH, 2, SHORT_OF_CPU),
            "/bob/sweep/0": (Band.BATCH, 1, SHORT_OF_CPU),
        }
    )


def test_queue_lists_pending_tasks_by_band_in_scheduling_order(as_bob, queued):
    page = as_bob.get("/api/v1/queue/").json()
    assert [(e["task"], e["band"], e["position"]) for e in page["results"]] == [
        ("/alice/train/0", "interactive", 1),
        ("/bob/probe/0", "interactive", 2),
        ("/alice/train/1", "interactive", 3),
        ("/bob/sweep/0", "batch", 1),
        ("/alice/train/2", "batch", 2),
    ]
    first = page["results"][0]
    assert (first["user"], first["state"], first["requested_band"], first["band_pending"]) == (
        "alice",
        "pending",
        "interactive",
        3,
    )
    assert first["pending_reason"] == {
        "code": "no_healthy_workers",
        "band": "interactive",
        "position": 1,
        "band_pending": 3,
        "tick": queued.pk,
        "text": f"No healthy workers available; position 1 of 3 in INTERACTIVE as of tick {queued.pk}",
    }
    assert first["changed_since_tick"] is False
    assert page["tick"] == queued.pk
    assert page["band_counts"] == {"interactive": 3, "batch": 2}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("band=batch", ["/bob/sweep/0", "/alice/train/2"]),
        ("user=bob", ["/bob/probe/0", "/bob/sweep/0"]),
        ("job=alice/train", ["/alice/train/0", "/alice/train/1", "/alice/train/2"]),
        ("job=nobody", []),
        ("page_size=2&page=2", ["/alice/train/1", "/bob/sweep/0"]),
    ],
)
def test_queue_filters_and_pages(as_alice, queued, query, expected):
    assert [e["task"] for e in as_alice.get(f"/api/v1/queue/?{query}").json()["results"]] == expected


def test_queue_shows_the_current_state_of_a_task_that_moved_since_the_tick(as_alice, alice, queued):
    cancel_job(alice, "/alice/train")
    results = as_alice.get("/api/v1/queue/?user=alice").json()["results"]
    assert {e["state"] for e in results} == {"killed"}
    # Marked, not renumbered: the places stay those of the tick.
    assert [(e["position"], e["band_pending"], e["changed_since_tick"]) for e in results] == [
        (1, 3, True),
        (3, 3, True),
        (2, 2, True),
    ]


def test_queue_is_empty_before_any_tick(as_alice, alice):
    submit(alice, "train")
    assert as_alice.get("/api/v1/queue/").json() == {
        "count": 0,
        "next": None,
        "previous": None,
        "results": [],
        "tick": None,
        "tick_at": None,
        "band_counts": {},
    }


@pytest.mark.parametrize("jobs", [2, 60])
def test_queue_runs_a_fixed_number_of_queries(as_alice, alice, jobs, django_assert_max_num_queries):
    entries = {}
    for i in range(jobs):
        submit(alice, f"j{i}", replicas=2)
        entries[f"/alice/j{i}/0"] = (Band.INTERACTIVE, 2 * i + 1, HELD)
        entries[f"/alice/j{i}/1"] = (Band.INTERACTIVE, 2 * i + 2, HELD)
    make_tick(entries)
    with django_assert_max_num_queries(LIST_QUERIES):
        assert len(as_alice.get("/api/v1/queue/").json()["results"]) == min(50, 2 * jobs)


# --- explain --------------------------------------------------------------------------------------


def test_explain_shows_the_downgrade_with_the_numbers(as_alice, alice, bob):
    UserBudget.objects.create(user_id="alice", budget_limit=50, max_band=Band.INTERACTIVE)
    running = submit(alice, "running", replicas=2, cpu=4, memory="16Gi")  # 36 points per task
    run_tasks(running, make_worker("w1"))
    submit(alice, "waiting", replicas=2)
    make_tick(
        {
            "/alice/waiting/0": (Band.BATCH, 4, SHORT_OF_CPU),
            "/alice/waiting/1": (Band.BATCH, 5, SHORT_OF_CPU),
            "/bob/x/0": (Band.BATCH, 1, HELD),
            "/bob/x/1": (Band.BATCH, 2, HELD),
            "/bob/x/2": (Band.BATCH, 3, HELD),
        }
    )

    explained = as_alice.get("/api/v1/jobs/alice/waiting:explain").json()
    assert explained["requested_band"] == "interactive"
    assert explained["effective_band"] == "batch"
    assert explained["downgrade"] == {
        "spend": 72,
        "limit": 50,
        "text": "INTERACTIVE runs as BATCH: spend 72 > limit 50",
        "badge": "downgraded: 22 pts over (72 > 50)",
    }
    assert (explained["spend"], explained["limit"]) == (72, 50)
    assert (explained["position"], explained["band_pending"], explained["band_queue_length"]) == (4, 5, 5)
    assert explained["pending_reason"]["code"] == "insufficient_cpu"
    assert explained["pending_reason"]["text"].startswith(
        "Insufficient CPU: need 1 core, but 1 of 1 matching worker has at most 0 cores free; position 4 of 5 in BATCH as of tick"
    )
    assert [(t["task"], t["band"], t["position"]) for t in explained["tasks"]] == [
        ("/alice/waiting/0", "batch", 4),
        ("/alice/waiting/1", "batch", 5),
    ]
    assert "over the limit" in explained["what_would_change"]
    assert "3 task(s) are ahead" in explained["what_would_change"]


def test_explain_of_a_job_under_budget_has_no_downgrade(as_alice, alice):
    submit(alice, "train")
    explained = as_alice.get("/api/v1/jobs/alice/train:explain").json()
    assert (explained["effective_band"], explained["downgrade"]) == ("interactive", None)
    assert explained["position"] is None
    assert explained["pending_reason"]["code"] == "not_yet_ticked"
    assert explained["pending_reason"]["text"] == "Waiting for the next scheduling tick"


def test_explain_of_production_work_is_never_downgraded(as_ada, ada):
    UserBudget.objects.create(user_id="ada", budget_limit=1, max_band=Band.INTERACTIVE)
    job = submit_job(ada, {"command": ["true"], "name": "serve", "priority": "production", "cpu": 8, "replicas": 2})
    run_tasks(job, make_worker(), 1)
    explained = as_ada.get("/api/v1/jobs/ada/serve:explain").json()
    assert (explained["effective_band"], explained["downgrade"]) == ("production", None)


def test_explain_lists_preemptions_suffered(as_alice, alice, ada):
    worker = make_worker("w1")
    victim_job = submit(alice, "train", priority="batch")
    preemptor_job = submit_job(ada, {"command": ["true"], "name": "serve", "priority": "production"})
    run_tasks(victim_job, worker)
    PreemptionEvent.objects.create(
        victim=victim_job.tasks.get(),
        preemptor=preemptor_job.tasks.get(),
        victim_band=Band.BATCH,
        preemptor_band=Band.PRODUCTION,
        worker=worker,
        reason="Preempted by /ada/serve/0 (PRODUCTION over BATCH)",
        created_at=timezone.now(),
        victim_user="alice",
        victim_job=victim_job,
        lost_point_ms=0,
    )
    explained = as_alice.get("/api/v1/jobs/alice/train:explain").json()
    assert [(p["victim"], p["preemptor"], p["preemptor_band"], p["worker"]) for p in explained["preemptions"]] == [
        ("/alice/train/0", "/ada/serve/0", "production", "w1")
    ]


def test_explain_of_a_finished_job_says_nothing_would_change(as_alice, alice):
    submit(alice, "train")
    cancel_job(alice, "/alice/train")
    assert as_alice.get("/api/v1/jobs/alice/train:explain").json()["what_would_change"].startswith("Nothing")


# --- preemption history ---------------------------------------------------------------------------


@pytest.fixture
def preemptions(alice, bob, ada):
    worker = make_worker("w1")
    serve = submit_job(ada, {"command": ["true"], "name": "serve", "priority": "production", "replicas": 50})
    events = []
    now = timezone.now()
    for i, (owner, band) in enumerate([(alice, "batch"), (bob, "interactive"), (alice, "interactive")]):
        victim = submit(owner, f"v{i}", priority=band)
        run_tasks(victim, worker)
        events.append(
            PreemptionEvent.objects.create(
                victim=victim.tasks.get(),
                preemptor=serve.tasks.get(index=i),
                victim_band=Band.parse(band),
                preemptor_band=Band.PRODUCTION,
                worker=worker,
                reason=f"Preempted by /ada/serve/{i}",
                created_at=now - timedelta(hours=3 - i),
                victim_user=owner.username,
                victim_job=victim,
                lost_point_ms=0,
            )
        )
    return events


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["/alice/v2/0", "/bob/v1/0", "/alice/v0/0"]),
        ("user=alice", ["/alice/v2/0", "/alice/v0/0"]),
        ("band=batch", ["/alice/v0/0"]),
        ("job=alice/v2", ["/alice/v2/0"]),
        ("job=/bob/v1", ["/bob/v1/0"]),
    ],
)
def test_preemption_history_filters(as_bob, preemptions, query, expected):
    page = as_bob.get(f"/api/v1/preemptions/?{query}").json()
    assert [p["victim"] for p in page["results"]] == expected


def test_preemption_history_since(as_bob, preemptions):
    since = (timezone.now() - timedelta(minutes=150)).isoformat()
    page = as_bob.get("/api/v1/preemptions/", {"since": since}).json()
    assert [p["victim"] for p in page["results"]] == ["/alice/v2/0", "/bob/v1/0"]
    event = page["results"][0]
    assert (event["preemptor"], event["victim_band"], event["preemptor_band"], event["worker"]) == (
        "/ada/serve/2",
        "interactive",
        "production",
        "w1",
    )


def test_preemption_history_rejects_a_bad_since(as_bob):
    response = as_bob.get("/api/v1/preemptions/?since=yesterday")
    assert response.status_code == 400
    assert error_of(response)["details"]["field"] == "since"


def test_preemption_history_runs_a_fixed_number_of_queries(as_bob, preemptions, django_assert_max_num_queries):
    with django_assert_max_num_queries(LIST_QUERIES):
        assert len(as_bob.get("/api/v1/preemptions/").json()["results"]) == 3


def test_explain_reads_the_tick_explanation_once_per_tick(as_alice, alice):
    """The explanation (100,000 tasks on a busy cluster) is parsed once per tick, not per call."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    submit(alice, "train", replicas=2)
    make_tick({"/alice/train/0": (Band.INTERACTIVE, 1, HELD), "/alice/train/1": (Band.INTERACTIVE, 2, HELD)})
    forget_board()
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as captured:
            assert as_alice.get("/api/v1/jobs/alice/train:explain").json()["position"] == 1
        counts.append(sum('"limits"' in q["sql"] for q in captured.captured_queries))
    assert counts == [1, 0]
    make_tick({"/alice/train/0": (Band.INTERACTIVE, 1, HELD)})
    with CaptureQueriesContext(connection) as captured:
        assert as_alice.get("/api/v1/jobs/alice/train:explain").json()["tasks"][1]["position"] is None
    assert sum('"limits"' in q["sql"] for q in captured.captured_queries) == 1
