"""A finished job's band is what it ran as (issue 23): never "downgraded" by its user's spend
now, and its finished tasks show the band and worker of their last attempt, in the API's
explain and job detail and on the console's job page."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus
from scheduler.core.bands import Band
from scheduler.execution.attempts import apply_reports
from scheduler.models import UserBudget
from tests.personas import make_worker, run_tasks, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_while_over_budget(alice):
    """alice's /alice/done ran as INTERACTIVE on slice-a-2 and succeeded; her other work holds
    more than her limit now, so work she queues now would run as BATCH."""
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    done = submit(alice, "done", replicas=2, cpu=1, memory="1Gi")
    host = make_worker("slice-a-2")
    run_tasks(done, host)
    apply_reports(
        [
            AttemptReport(AttemptRef(t.pk, 1), AttemptStatus.SUCCEEDED, exit_code=0, worker="slice-a-2")
            for t in done.tasks.all()
        ]
    )
    big = submit(alice, "big", replicas=2, cpu=8, memory="32Gi")
    run_tasks(big, make_worker("w-big", cpu=64, memory_gib=512))
    done.refresh_from_db()
    assert done.state == "succeeded"
    return done


def test_explain_of_a_finished_job_gives_the_band_it_ran_as_not_a_downgrade(as_alice, finished_while_over_budget):
    explained = as_alice.get("/api/v1/jobs/alice/done:explain").json()

    assert explained["downgrade"] is None
    assert (explained["requested_band"], explained["effective_band"], explained["ran_as"]) == (
        "interactive",
        "interactive",
        "interactive",
    )
    assert [(t["state"], t["band"], t["worker"]) for t in explained["tasks"]] == [
        ("succeeded", "interactive", "slice-a-2"),
        ("succeeded", "interactive", "slice-a-2"),
    ]
    assert explained["bands_text"] == "2 ran as INTERACTIVE"
    # alice is over budget now: her unfinished job carries the downgrade, the finished one not.
    assert as_alice.get("/api/v1/jobs/alice/big:explain").json()["downgrade"]["limit"] == 10
    assert explained["what_would_change"].startswith("Nothing: the job has finished")


def test_job_detail_shows_finished_tasks_band_and_worker_of_their_last_attempt(as_alice, finished_while_over_budget):
    detail = as_alice.get("/api/v1/jobs/alice/done").json()

    assert [(t["state"], t["band"], t["worker"]) for t in detail["tasks"]] == [
        ("succeeded", "interactive", "slice-a-2"),
        ("succeeded", "interactive", "slice-a-2"),
    ]
    assert [t["attempts"][-1]["worker"] for t in detail["tasks"]] == ["slice-a-2", "slice-a-2"]


def test_job_page_of_a_finished_job_says_what_it_ran_as_and_where(alice, finished_while_over_budget):
    client = Client()
    client.force_login(alice)
    html = client.get("/jobs/alice/done/").content.decode()

    assert 'id="downgrade"' not in html and "downgraded" not in html
    assert 'id="ran-as"' in html
    assert "<dt>alice's spend / limit</dt>" in html  # whose spend: the job's user, not the reader
    rows = html[html.index("<h2>Tasks</h2>") :]
    assert rows.count("slice-a-2") >= 4  # the worker column and the last attempt column of both tasks
    assert rows.count('title="its last attempt ran as"') == 2


def test_job_page_says_pending_as_of_a_tick_only_while_the_job_has_unfinished_tasks(alice, finished_while_over_budget):
    from scheduler.tick.run import run_tick

    run_tick()
    client = Client()
    client.force_login(alice)
    finished = client.get("/jobs/alice/done/").content.decode()
    unfinished = client.get("/jobs/alice/big/").content.decode()

    assert 'id="band-summary"' in finished and "pending as of tick" not in finished
    assert "pending as of tick" in unfinished
