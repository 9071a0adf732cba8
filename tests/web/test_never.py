"""A job that can never run (issue 23) says so wherever it is listed: a NEVER marker in the
queue (console and API) and the jobs table, no green "Accepted" in what-if, and "What would
change it" starts from the verdict instead of counting the tasks ahead of it."""

from __future__ import annotations

import re

import pytest

from scheduler.models import Job
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued_never(alice):
    """An 8-core worker held by bob; alice's /alice/ahead (3 tasks that fit once it frees) and,
    submitted later, /alice/huge (64 cores: no worker has them, ever)."""
    host = make_worker("w1", cpu=8, memory_gib=64)
    start_running(make_job("/bob/hold", cpu=8), host)
    make_job("/alice/ahead", cpu=4, replicas=3, submitted_at_ms=NOW_MS - 10_000)
    make_job("/alice/huge", cpu=64, submitted_at_ms=NOW_MS - 5_000)
    run_tick(NOW_MS)


def never_rows(html: str) -> list[str]:
    """The job of every table row that carries the NEVER marker."""
    return [
        m
        for row in re.findall(r"<tr>.*?</tr>", html, re.S)
        if 'data-never="true"' in row
        for m in re.findall(r'href="/jobs/([^"]+)/"', row)[:1]
    ]


def test_the_queue_marks_the_job_that_can_never_run(queued_never, clients, alice):
    entries = token_client(alice).get("/api/v1/queue/").json()["results"]
    html = clients["alice"].get("/queue/").content.decode()

    assert {(e["task"], e["never"]) for e in entries} == {
        ("/alice/ahead/0", False),
        ("/alice/ahead/1", False),
        ("/alice/ahead/2", False),
        ("/alice/huge/0", True),
    }
    assert never_rows(html) == ["alice/huge"]


def test_the_jobs_table_marks_the_job_that_can_never_run(queued_never, clients):
    html = clients["alice"].get("/jobs/").content.decode()
    assert never_rows(html) == ["alice/huge"]


def test_what_would_change_it_starts_from_the_verdict_not_the_tasks_ahead(queued_never, clients, alice):
    explained = token_client(alice).get("/api/v1/jobs/alice/huge:explain").json()
    assert (explained["feasibility"]["verdict"], explained["position"]) == ("never", 4)  # 3 tasks are ahead of it
    assert "ahead" not in explained["what_would_change"]
    assert explained["what_would_change"].startswith("Only a change of the request or of the cluster: it can never run")

    html = clients["alice"].get("/jobs/alice/huge/").content.decode()
    change = html[html.index("<h2>What would change it</h2>") :]
    sentences = re.findall(r"<li>(.*?)</li>", change[: change.index("</ul>")], re.S)
    assert sentences[0].startswith("It can never run on the cluster as it is: Never fits")
    assert not any("ahead" in s for s in sentences)


def test_what_if_of_a_job_that_can_never_run_is_not_a_green_accepted(queued_never, clients, alice):
    answer = (
        token_client(alice)
        .post("/api/v1/what-if/", {"name": "probe", "cpu": 64, "memory": "1Gi"}, format="json")
        .json()
    )
    fits = (
        token_client(alice).post("/api/v1/what-if/", {"name": "probe", "cpu": 1, "memory": "1Gi"}, format="json").json()
    )
    html = clients["alice"].get("/what-if/?name=probe&replicas=1&cpu=64&memory=1Gi&device_type=cpu").content.decode()

    assert (answer["accepted"], answer["never"], answer["feasibility"]["verdict"]) == (True, True, "never")
    assert (fits["accepted"], fits["never"]) == (True, False)
    assert 'class="verdict-ok"' not in html
    assert 'id="verdict-never"' in html and "but it can never run" in html
    assert Job.objects.filter(name="/alice/probe").count() == 0
