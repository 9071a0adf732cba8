"""``POST /api/v1/jobs:cancel``: ids or a filter, a dry run that counts, all or nothing, and the
role rule (researchers their own jobs; admins any job)."""

from __future__ import annotations

import pytest

from scheduler.models import Attempt, DispatchIntent, Job
from tests.api.conftest import error_of
from tests.personas import make_job, make_worker, run_tasks

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs:cancel"


def post(client, body):
    return client.post(URL, body, format="json")


@pytest.fixture
def work(alice, bob):
    worker = make_worker()
    run_tasks(make_job("/alice/a", replicas=2), worker, 1)
    parent = make_job("/alice/b")
    make_job("/alice/b/child", parent=parent, replicas=3)
    make_job("/bob/c")
    Job.objects.filter(pk=make_job("/alice/old").pk).update(state="succeeded")


def test_a_dry_run_counts_jobs_and_tasks_and_writes_nothing(as_alice, work):
    answer = post(as_alice, {"filter": {"user": "alice"}, "dry_run": True}).json()
    assert answer == {
        "dry_run": True,
        "selected": ["/alice/a", "/alice/b", "/alice/b/child"],
        "selected_count": 3,
        "jobs": 3,
        "tasks": 6,
    }
    assert not Job.objects.filter(state="killed").exists()


def test_cancelling_by_filter_kills_trees_and_stops_running_attempts(as_alice, work):
    answer = post(as_alice, {"filter": {"user": "alice", "name": "b"}}).json()
    assert (answer["jobs"], answer["tasks"]) == (2, 4)
    assert set(Job.objects.filter(state="killed").values_list("name", flat=True)) == {"/alice/b", "/alice/b/child"}
    post(as_alice, {"ids": ["/alice/a", "alice/old"]})
    assert Job.objects.get(name="/alice/a").state == "killed"
    assert Job.objects.get(name="/alice/old").state == "succeeded"  # finished jobs are left alone
    assert Attempt.objects.get().state == "killed"
    assert DispatchIntent.objects.filter(kind="stop").count() == 1


@pytest.mark.parametrize("body", [{"ids": ["/alice/a", "/bob/c"]}, {"filter": {"state": "pending"}}])
def test_a_researcher_is_refused_others_jobs_and_nothing_is_cancelled(as_alice, work, body):
    response = post(as_alice, body)
    assert response.status_code == 403 and error_of(response)["code"] == "PERMISSION_DENIED"
    assert not Job.objects.filter(state="killed").exists()


def test_an_admin_cancels_any_job(as_ada, work):
    answer = post(as_ada, {"filter": {"state": "pending"}}).json()
    assert answer["selected"] == ["/alice/b", "/alice/b/child", "/bob/c"]


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"filter": {}}, 400, "filter"),
        ({"filter": {"usr": "alice"}}, 400, "filter"),
        ({"filter": {"user": "alice", "band": "urgent"}}, 400, "band"),
        ({"filter": {"user": 3}}, 400, "user"),
        ({"filter": "user=alice"}, 400, "filter"),
        ({"ids": "/alice/a"}, 400, "ids"),
        ({"ids": []}, 400, "ids"),
        ({"ids": ["/alice/a"], "filter": {"user": "alice"}}, 400, "ids"),
        ({"ids": ["/alice/a"], "dry_run": "yes"}, 400, "dry_run"),
        ({"ids": ["/alice/a"], "force": True}, 400, "force"),
        ({"ids": ["/alice/a", "/alice/nope"]}, 404, "ids"),
    ],
)
def test_a_bad_body_gets_a_stable_error_and_cancels_nothing(as_alice, work, body, status, field):
    response = post(as_alice, body)
    assert response.status_code == status
    assert error_of(response)["details"]["field"] == field
    assert not Job.objects.filter(state="killed").exists()


def test_the_jobs_list_takes_the_same_filters_and_shows_the_effective_band(as_bob, work):
    page = as_bob.get("/api/v1/jobs/?user=alice&sort=name&state=pending").json()
    assert [(j["id"], j["effective_band"]) for j in page["results"]] == [
        ("/alice/b", "interactive"),
        ("/alice/b/child", "interactive"),
    ]
    bad = as_bob.get("/api/v1/jobs/?route=slurm")
    assert bad.status_code == 400 and error_of(bad)["details"]["field"] == "route"
