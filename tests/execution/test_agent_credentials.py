"""Each worker agent acts only as its own worker (issue 13, section 1).

An agent holds its worker's credential: it may register, heartbeat and report as that worker
only; a report about an attempt placed on another worker is refused (403) and logged; and the
credential opens nothing else (no submissions, uplifts, console or logs).
"""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command

from scheduler.execution.dispatcher import drain
from scheduler.execution.enrolment import worker_for_credential
from scheduler.models import Attempt, Job, Task, WorkerCredential
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, agent_client, make_job, make_worker, token_client

pytestmark = pytest.mark.django_db

CALLS = {
    "register/": {"name": "w2", "cpu": 1_000_000, "memory": "1Ti"},
    "heartbeat/": {"name": "w2", "running": [], "healthy": False},
    "report/": {"name": "w2", "reports": []},
}


@pytest.fixture
def two_workers():
    """w1 and w2, with a job of alice's started on w2 (its start order waiting for w2's agent)."""
    make_worker("w1", cpu=1)
    w2 = make_worker("w2", cpu=4)
    make_job("/alice/train", cpu=2)
    run_tick(NOW_MS)
    drain()
    return w2


@pytest.mark.parametrize("path", sorted(CALLS))
def test_another_workers_credential_is_refused_for_every_agent_call(two_workers, path, caplog):
    before = list(two_workers.__class__.objects.filter(name="w2").values())

    with caplog.at_level(logging.WARNING, logger="scheduler.api.agent"):
        response = agent_client("w1").post(f"/api/v1/agent/{path}", CALLS[path], format="json")

    assert response.status_code == 403, response.content
    assert response.json()["code"] == "PERMISSION_DENIED"
    assert "belongs to worker w1" in response.json()["message"]
    assert list(two_workers.__class__.objects.filter(name="w2").values()) == before
    assert any("tried to act as worker w2" in r.getMessage() for r in caplog.records)


def test_another_workers_agent_does_not_receive_its_start_orders(two_workers):
    stolen = agent_client("w1").post("/api/v1/agent/heartbeat/", {"name": "w2", "running": []}, format="json")
    own = agent_client("w2").post("/api/v1/agent/heartbeat/", {"name": "w2", "running": []}, format="json")

    assert stolen.status_code == 403 and "starts" not in stolen.json()
    assert [order["name"] for order in own.json()["starts"]] == ["/alice/train/0"]


def test_a_report_about_an_attempt_placed_on_another_worker_is_refused_and_logged(two_workers, caplog):
    task = Task.objects.get()
    assert task.worker.name == "w2"
    body = {"name": "w1", "reports": [{"task": task.pk, "attempt": 1, "status": "succeeded", "exit_code": 0}]}

    with caplog.at_level(logging.WARNING, logger="scheduler.api.agent"):
        response = agent_client("w1").post("/api/v1/agent/report/", body, format="json")

    assert response.status_code == 403, response.content
    assert response.json()["code"] == "PERMISSION_DENIED"
    assert Attempt.objects.get(task=task).state != "succeeded"
    assert any("reported on attempts not placed on it" in r.getMessage() for r in caplog.records)


def test_the_workers_own_agent_reports_on_its_attempts(two_workers):
    task = Task.objects.get()
    body = {"name": "w2", "reports": [{"task": task.pk, "attempt": 1, "status": "running"}]}

    response = agent_client("w2").post("/api/v1/agent/report/", body, format="json")

    assert response.json() == {"applied": 1, "ignored": 0}


def test_a_worker_credential_cannot_read_task_logs(two_workers, settings, tmp_path):
    settings.TASK_LOG_DIR = tmp_path
    task = Task.objects.get()
    (tmp_path / str(task.pk)).mkdir()
    (tmp_path / str(task.pk) / "1.log").write_text("secret output\n")

    for worker in ("w1", "w2"):
        response = agent_client(worker).get(f"/api/v1/agent/logs/{task.pk}/1/")
        assert response.status_code == 403, response.content
        assert b"secret output" not in response.content


def test_a_worker_credential_cannot_submit_request_uplifts_or_open_the_console(two_workers):
    agent = agent_client("w2")

    submitted = agent.post("/api/v1/jobs/", {"name": "sneaky"}, format="json")
    uplift = agent.post("/api/v1/uplifts/", {"budget_limit": 9, "reason": "x", "duration_seconds": 60}, format="json")
    pages = [agent.get(url) for url in ("/queue/", "/jobs/new/", "/budgets/w2/")]
    posted = agent.post("/jobs/new/", {"name": "sneaky-form", "cpu": "1", "memory": "1Gi"})

    assert (submitted.status_code, uplift.status_code) == (401, 401)
    # The console knows sessions only: it sends the caller to sign in.
    for page in [*pages, posted]:
        assert page.status_code == 302 and "/login" in page["Location"], page
    assert not Job.objects.filter(name__contains="sneaky").exists()


def test_peoples_tokens_cannot_act_as_a_worker_operators_included(two_workers, olivia):
    response = token_client(olivia).post("/api/v1/agent/heartbeat/", {"name": "w2", "running": []}, format="json")

    assert response.status_code == 403
    assert "a worker's own credential" in response.json()["message"]


def test_minting_again_replaces_the_credential_and_only_its_digest_is_stored(two_workers):
    old = agent_client("w2")
    new = agent_client("w2")

    assert old.post("/api/v1/agent/heartbeat/", {"name": "w2"}, format="json").status_code == 401
    assert new.post("/api/v1/agent/heartbeat/", {"name": "w2"}, format="json").status_code == 200
    credential = new._credentials["HTTP_AUTHORIZATION"].split()[1]
    row = WorkerCredential.objects.get(worker_name="w2")
    assert credential not in row.digest and len(row.digest) == 128


def test_an_operator_mints_a_workers_credential_over_the_api_and_a_researcher_may_not(two_workers, olivia, alice):
    refused = token_client(alice).post("/api/v1/workers/w2:credential")
    minted = token_client(olivia).post("/api/v1/workers/w2:credential")

    assert refused.status_code == 403
    assert minted.status_code == 201
    assert worker_for_credential(minted.json()["credential"]) == "w2"


def test_the_worker_credential_command_writes_it_readable_by_its_owner_only_and_revokes_it(tmp_path):
    path = tmp_path / "cpu-9.credential"

    call_command("worker_credential", "cpu-9", file=str(path), stdout=io.StringIO())
    credential = path.read_text().strip()
    assert worker_for_credential(credential) == "cpu-9"
    assert path.stat().st_mode & 0o777 == 0o600

    call_command("worker_credential", "cpu-9", revoke=True, stdout=io.StringIO())
    assert worker_for_credential(credential) is None
