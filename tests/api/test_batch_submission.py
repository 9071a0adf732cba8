"""Sweeps in one call: ``POST jobs:batch`` is all or nothing, by the rules of ``POST jobs/``."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.core.bands import Band
from scheduler.jobs.submit import request_prompt_tick
from scheduler.models import Job, Task, UserBudget
from tests.api.conftest import error_of
from tests.personas import GIB, make_worker, submit

BATCH = "/api/v1/jobs:batch"
JOBS = "/api/v1/jobs/"


def sweep(n: int, **spec) -> list[dict]:
    return [{"name": f"sweep-{i}", "command": ["python", "train.py", f"--lr={i}"], **spec} for i in range(n)]


def post(client, jobs):
    return client.post(BATCH, {"jobs": jobs}, format="json")


def refused(response, status: int, code: str, index: int, field: str) -> dict:
    assert response.status_code == status, response.content
    body = error_of(response)
    assert body["code"] == code
    assert body["details"]["index"] == index
    assert body["details"]["field"] == f"jobs[{index}].{field}"
    assert body["message"].startswith(f"jobs[{index}]"), body["message"]
    return body


def counts():
    return Job.objects.count(), Task.objects.count()


def test_a_sweep_submits_every_job_in_order_with_consecutive_times(as_alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(as_alice, sweep(5, replicas=2))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["count"] == 5
    assert [j["id"] for j in body["jobs"]] == [f"/alice/sweep-{i}" for i in range(5)]
    assert {j["band"] for j in body["jobs"]} == {"interactive"}
    rows = list(Job.objects.order_by("submitted_at_ms"))
    assert [r.name for r in rows] == [f"/alice/sweep-{i}" for i in range(5)]
    times = [r.submitted_at_ms for r in rows]
    assert times == list(range(times[0], times[0] + 5))
    assert [j["submitted_at_ms"] for j in body["jobs"]] == times
    assert sorted(Task.objects.values_list("job__name", "index", "state")) == sorted(
        (f"/alice/sweep-{i}", k, "pending") for i in range(5) for k in range(2)
    )
    assert callbacks == [request_prompt_tick]  # one prompt tick for the whole batch


def test_a_batch_job_is_the_row_a_single_submission_writes(as_alice):
    spec = {
        "replicas": 3,
        "cpu": 2.5,
        "memory": "3Gi",
        "device": {"type": "gpu", "variant": "h100", "count": 2},
        "constraints": [{"key": "zone", "op": "in", "value": ["a", "b"]}],
        "group_by": "zone",
        "scheduling_timeout_seconds": 60,
        "priority": "batch",
        "command": ["python", "x.py"],
    }
    assert as_alice.post(JOBS, {"name": "one", **spec}, format="json").status_code == 201
    assert post(as_alice, [{"name": "many", **spec}]).status_code == 201
    skip = {"id", "name", "submitted_at_ms", "root_submitted_at_ms", "scheduling_deadline_ms", "created_at", "request"}
    one, many = (Job.objects.filter(name=n).values().get() for n in ("/alice/one", "/alice/many"))
    assert {k: v for k, v in one.items() if k not in skip} == {k: v for k, v in many.items() if k not in skip}
    assert {**one["request"], "name": "x"} == {**many["request"], "name": "x"}
    assert many["scheduling_deadline_ms"] - many["submitted_at_ms"] == 60_000
    assert Job.objects.get(name="/alice/many").created_at is not None


def test_one_bad_item_refuses_the_batch_naming_its_index_and_field(as_alice):
    jobs = sweep(4)
    jobs[2]["cpu"] = -1
    body = refused(post(as_alice, jobs), 400, "INVALID_ARGUMENT", 2, "cpu")
    assert body["details"]["errors"] == [
        {"index": 2, "code": "INVALID_ARGUMENT", "message": body["message"], "field": "jobs[2].cpu"}
    ]
    assert counts() == (0, 0)


def test_every_refused_item_is_listed_and_the_first_decides_the_status(as_alice, alice):
    submit(alice, "sweep-3")
    jobs = sweep(5)
    jobs[1]["priority"] = "production"  # admins only: 403
    jobs[4]["colour"] = "blue"  # unknown field: 400
    body = refused(post(as_alice, jobs), 403, "PERMISSION_DENIED", 1, "priority")
    assert [(e["index"], e["code"], e["field"]) for e in body["details"]["errors"]] == [
        (1, "PERMISSION_DENIED", "jobs[1].priority"),
        (3, "FAILED_PRECONDITION", "jobs[3].name"),
        (4, "INVALID_ARGUMENT", "jobs[4].colour"),
    ]
    assert body["details"]["refused"] == 3
    assert counts() == (1, 1)


def test_a_band_above_max_band_is_permission_denied_naming_the_item(as_alice):
    UserBudget.objects.create(user_id="alice", budget_limit=1000, max_band=Band.BATCH)
    jobs = sweep(3, priority="batch")
    jobs[1]["priority"] = "interactive"
    body = refused(post(as_alice, jobs), 403, "PERMISSION_DENIED", 1, "priority")
    assert "jobs[1]: Budget identity 'alice' cannot submit INTERACTIVE jobs (max band: BATCH)" in body["message"]
    assert body["details"]["max_band"] == "batch"
    assert counts() == (0, 0)


def test_the_unfinished_task_cap_counts_the_batchs_earlier_jobs(as_alice, alice, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 10
    submit(alice, "running", replicas=2)
    # 2 unfinished + 4 + 4 = 10 is within the cap; the third job's 4 more are not.
    body = refused(post(as_alice, sweep(3, replicas=4)), 429, "RESOURCE_EXHAUSTED", 2, "replicas")
    assert body["details"]["active_tasks"] == 2
    assert body["details"]["batch_tasks"] == 8
    assert "8 in this batch's earlier jobs" in body["message"]
    assert counts() == (1, 2)
    assert post(as_alice, sweep(2, replicas=4)).status_code == 201
    assert counts() == (3, 10)


def test_the_cap_is_counted_per_budget_identity_across_a_batch(as_ada, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 4
    jobs = [
        {"name": f"/{user}/j{i}", "replicas": 2, "command": ["true"]} for i in range(2) for user in ("alice", "bob")
    ]
    assert post(as_ada, jobs).status_code == 201
    refused(post(as_ada, [{"name": "/bob/more", "command": ["true"]}]), 429, "RESOURCE_EXHAUSTED", 0, "replicas")


def test_an_id_twice_in_one_batch_is_refused(as_alice):
    jobs = sweep(3)
    jobs[2]["name"] = "/alice/sweep-0"
    body = refused(post(as_alice, jobs), 409, "FAILED_PRECONDITION", 2, "name")
    assert body["details"]["other_index"] == 0
    assert counts() == (0, 0)


def test_children_of_an_existing_parent_inherit_its_band(as_alice, alice):
    parent = submit(alice, "study", priority="batch")
    response = post(as_alice, sweep(3, parent="alice/study"))
    assert response.status_code == 201, response.content
    children = Job.objects.filter(parent=parent)
    assert sorted(children.values_list("name", "band", "depth", "root_submitted_at_ms")) == [
        (f"/alice/study/sweep-{i}", Band.BATCH, 2, parent.root_submitted_at_ms) for i in range(3)
    ]


def test_researchers_may_not_submit_into_another_namespace(as_bob):
    refused(post(as_bob, [{"name": "/alice/x", "command": ["true"]}]), 403, "PERMISSION_DENIED", 0, "name")


def test_warnings_are_those_of_a_single_submission(as_alice):
    make_worker("small", cpu=4, memory_gib=8)
    body = post(as_alice, sweep(2, cpu=64)).json()
    single = as_alice.post(JOBS, {"name": "one", "cpu": 64, "command": ["true"]}, format="json").json()
    assert single["warnings"]
    assert [j["warnings"] for j in body["jobs"]] == [single["warnings"]] * 2
    assert body["jobs"][0]["warnings"][0].startswith("no registered worker could run a task of this job")
    assert make_worker("big", cpu=128, memory_gib=8 * GIB // GIB)
    assert post(as_alice, [{"name": "later", "cpu": 64, "command": ["true"]}]).json()["jobs"][0]["warnings"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "jobs"),
        ({"jobs": []}, "jobs"),
        ({"jobs": {"name": "x"}}, "jobs"),
        ({"jobs": [{"name": "x", "command": ["true"]}], "dry_run": True}, "dry_run"),
    ],
)
def test_a_malformed_batch_is_invalid_argument(as_alice, body, field):
    response = as_alice.post(BATCH, body, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["details"]["field"] == field
    assert counts() == (0, 0)


def test_an_item_that_is_not_an_object_is_named(as_alice):
    refused_body = post(as_alice, [{"name": "x", "command": ["true"]}, "y"])
    assert refused_body.status_code == 400
    body = error_of(refused_body)
    assert (body["details"]["index"], body["details"]["field"]) == (1, "jobs[1]")


def test_more_jobs_than_the_batch_limit_is_resource_exhausted(as_alice, settings):
    settings.MAX_JOBS_PER_BATCH = 3
    response = post(as_alice, sweep(4))
    assert response.status_code == 429
    body = error_of(response)
    assert (body["code"], body["details"]["field"], body["details"]["limit"]) == ("RESOURCE_EXHAUSTED", "jobs", 3)
    assert post(as_alice, sweep(3)).status_code == 201


def test_anonymous_is_unauthenticated(clients):
    assert post(clients["anonymous"], sweep(1)).status_code == 401
    assert counts() == (0, 0)


def test_the_whole_batch_is_one_insert_per_table(as_alice):
    with CaptureQueriesContext(connection) as queries:
        assert post(as_alice, sweep(200, replicas=3)).status_code == 201
    # An executemany (SQLite) is logged once, as "<n> times: INSERT ...": one prepared statement.
    statements = [re.sub(r"^\d+ times: ", "", q["sql"]).lstrip() for q in queries.captured_queries]
    inserts = [q for q in statements if q.upper().startswith(("INSERT", "COPY"))]
    job_inserts = [q for q in inserts if "scheduler_job " in q or "scheduler_job(" in q]
    task_inserts = [q for q in inserts if "scheduler_task" in q]
    assert (len(job_inserts), len(task_inserts)) == (1, 1), inserts
    assert counts() == (200, 600)
    # Lookups do not grow with the batch: one parent, one budget, one count, one id check.
    assert len(queries.captured_queries) < 25, [q["sql"] for q in queries.captured_queries]


def test_submission_times_stay_strictly_increasing_around_batches(as_alice, alice):
    submit(alice, "before")
    assert post(as_alice, sweep(3)).status_code == 201
    submit(alice, "after")
    assert post(as_alice, [{"name": "last", "command": ["true"]}]).status_code == 201
    names = list(Job.objects.order_by("submitted_at_ms").values_list("name", flat=True))
    assert names == ["/alice/before", *(f"/alice/sweep-{i}" for i in range(3)), "/alice/after", "/alice/last"]
    times = list(Job.objects.order_by("submitted_at_ms").values_list("submitted_at_ms", flat=True))
    assert len(set(times)) == len(times)


def test_the_answer_is_what_its_schema_serializer_renders(alice):
    from scheduler.api.serializers import JobBatchItemSerializer, batch_item_json
    from scheduler.jobs.submit import submit_jobs

    make_worker("small", cpu=1, memory_gib=1)  # a warning to render
    jobs = submit_jobs(alice, sweep(2, cpu=8, priority="batch"))
    assert [batch_item_json(j) for j in jobs] == JobBatchItemSerializer(jobs, many=True).data
    assert jobs[0].warnings and jobs[0].band == Band.BATCH
