"""The agent API over HTTP: who may call it, the wire formats, and the task log view."""

from __future__ import annotations

import pytest

from scheduler.execution.dispatcher import drain
from scheduler.models import Attempt, Task, Worker
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, agent_client, make_job, make_worker

pytestmark = pytest.mark.django_db

REGISTER = {
    "name": "slice-a-0",
    "cpu": 8,
    "memory": "16Gi",
    "device": {"type": "tpu", "variant": "v5p-8", "count": 4},
    "attributes": {"tpu-name": "slice-a", "tpu-worker-id": "0"},
}


@pytest.mark.parametrize(
    ("persona", "status"),
    [("anonymous", 401), ("alice", 403), ("charlie", 403), ("slice-agent", 201), ("olivia", 403), ("ada", 403)],
)
def test_only_the_workers_own_agent_may_register_it(clients, persona, status):
    """People's tokens, operators' and admins' too, cannot act as a worker (they register
    workers through ``POST workers/``); only the credential of slice-a-0 registers slice-a-0."""
    clients["slice-agent"] = agent_client("slice-a-0")
    response = clients[persona].post("/api/v1/agent/register/", REGISTER, format="json")

    assert response.status_code == status, response.content
    if status == 403:
        assert response.json()["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("path", ["heartbeat/", "report/"])
def test_researchers_may_not_heartbeat_or_report(clients, path):
    make_worker("w1")

    response = clients["charlie"].post(f"/api/v1/agent/{path}", {"name": "w1", "reports": []}, format="json")

    assert response.status_code == 403


def test_registering_declares_capacity_accelerators_and_attributes_and_is_an_upsert(clients):
    agent = agent_client("slice-a-0")
    first = agent.post("/api/v1/agent/register/", REGISTER, format="json")
    again = agent.post("/api/v1/agent/register/", {**REGISTER, "cpu": "4"}, format="json")

    assert (first.status_code, first.json()["created"]) == (201, True)
    assert (again.status_code, again.json()["created"]) == (200, False)
    worker = Worker.objects.get(name="slice-a-0")
    assert (worker.cpu_millicores, worker.memory_bytes) == (4000, 16 * 2**30)
    assert (worker.device_type, worker.device_variant, worker.device_count) == ("tpu", "v5p-8", 4)
    assert worker.attributes == {"tpu-name": "slice-a", "tpu-worker-id": "0"}
    assert worker.healthy and worker.last_heartbeat is not None and worker.backend == "local"


def test_registering_with_a_bad_size_names_the_field(clients):
    response = agent_client("slice-a-0").post("/api/v1/agent/register/", {**REGISTER, "memory": "lots"}, format="json")

    assert response.status_code == 400
    assert response.json()["details"]["field"] == "memory"


def test_heartbeat_of_an_unknown_worker_is_not_found_so_the_agent_registers_again(clients):
    response = agent_client("ghost").post("/api/v1/agent/heartbeat/", {"name": "ghost", "running": []}, format="json")

    assert response.status_code == 404
    assert response.json()["code"] == "NOT_FOUND"


def test_heartbeat_answers_with_start_orders_carrying_command_and_environment(clients):
    make_worker("w1")
    job = make_job("/alice/train")
    job.command = ["python", "-c", "print(1)"]
    job.save()
    run_tick(NOW_MS)
    drain()
    task = Task.objects.get(job=job)

    response = clients["agent"].post("/api/v1/agent/heartbeat/", {"name": "w1", "running": []}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["stops"] == []
    [start] = body["starts"]
    assert start == {
        "task": task.pk,
        "attempt": 1,
        "uid": f"{task.pk}-1",
        "name": "/alice/train/0",
        "job": "/alice/train",
        "user": "alice",
        "band": "interactive",
        "memory": job.memory_bytes,
        "command": ["python", "-c", "print(1)"],
        "env": {
            "IRIS_TASK_ID": "/alice/train/0",
            "IRIS_JOB_ID": "/alice/train",
            "IRIS_TASK_INDEX": "0",
            "IRIS_ATTEMPT": "1",
            "IRIS_BAND": "interactive",
            "IRIS_WORKER": "w1",
        },
    }


def test_reports_over_http_apply_and_a_late_one_is_ignored(clients):
    make_worker("w1")
    make_job("/alice/a")
    run_tick(NOW_MS)
    task = Task.objects.get()
    url = "/api/v1/agent/report/"

    done = clients["agent"].post(
        url,
        {
            "name": "w1",
            "reports": [
                {"task": task.pk, "attempt": 1, "status": "running"},
                {"task": task.pk, "attempt": 1, "status": "succeeded", "exit_code": 0},
            ],
        },
        format="json",
    )
    late = clients["agent"].post(
        url,
        {
            "name": "w1",
            "reports": [
                {"task": task.pk, "attempt": 1, "status": "running"},
            ],
        },
        format="json",
    )

    assert done.json() == {"applied": 2, "ignored": 0}
    assert late.json() == {"applied": 0, "ignored": 1}
    assert Attempt.objects.get(task=task).state == "succeeded"


def test_a_report_with_an_unknown_status_is_rejected(clients):
    make_worker("w1")
    response = clients["agent"].post(
        "/api/v1/agent/report/",
        {"name": "w1", "reports": [{"task": 1, "attempt": 1, "status": "exploded"}]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_ARGUMENT"


@pytest.fixture
def logged_attempt(settings, tmp_path, personas):
    settings.TASK_LOG_DIR = tmp_path / "logs"
    make_worker("w1")
    make_job("/alice/train")
    run_tick(NOW_MS)
    task = Task.objects.get()
    path = settings.TASK_LOG_DIR / str(task.pk) / "1.log"
    path.parent.mkdir(parents=True)
    path.write_text("step 1\nstep 2\n")
    return task


@pytest.mark.parametrize(
    ("persona", "status"),
    [("anonymous", 401), ("alice", 200), ("charlie", 403), ("olivia", 200), ("ada", 200), ("agent", 403)],
)
def test_task_logs_are_for_the_jobs_owner_operators_and_admins(clients, logged_attempt, persona, status):
    response = clients[persona].get(f"/api/v1/agent/logs/{logged_attempt.pk}/1/")

    assert response.status_code == status
    if status == 200:
        assert response.content == b"step 1\nstep 2\n"
        assert response["Content-Type"].startswith("text/plain")


def test_task_log_tail_returns_the_last_bytes(clients, logged_attempt):
    response = clients["alice"].get(f"/api/v1/agent/logs/{logged_attempt.pk}/1/?tail=7")

    assert response.content == b"step 2\n"
    assert response["X-Log-Size"] == "14"


def test_a_missing_log_says_where_it_is_written(clients, logged_attempt, settings, tmp_path):
    settings.TASK_LOG_DIR = tmp_path / "elsewhere"

    response = clients["alice"].get(f"/api/v1/agent/logs/{logged_attempt.pk}/1/")

    assert response.status_code == 404
    assert "on worker w1" in response.json()["message"]


def test_logs_of_an_attempt_that_does_not_exist_are_not_found(clients, logged_attempt):
    assert clients["alice"].get(f"/api/v1/agent/logs/{logged_attempt.pk}/9/").status_code == 404


# --- logs shipped by remote agents ------------------------------------------------------------------


def ship(client, task, offset, data: bytes, attempt=1, name="w1"):
    import base64

    return client.post(
        "/api/v1/agent/logs/",
        {"name": name, "task": task.pk, "attempt": attempt, "offset": offset, "data": base64.b64encode(data).decode()},
        format="json",
    )


@pytest.fixture
def remote_attempt(settings, tmp_path, personas):
    """An attempt on w1 whose log is not on this server's disk (its agent runs elsewhere)."""
    settings.TASK_LOG_DIR = tmp_path / "logs"
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    make_worker("w1")
    make_worker("w2")
    make_job("/alice/train")
    run_tick(NOW_MS)
    return Task.objects.get()


def test_a_shipped_log_is_served_and_a_retried_chunk_is_not_stored_twice(clients, remote_attempt):
    worker = Attempt.objects.get().worker.name
    agent = agent_client(worker)
    assert ship(agent, remote_attempt, 0, b"step 1\n", name=worker).json() == {"size": 7, "truncated": False}
    assert ship(agent, remote_attempt, 0, b"step 1\n", name=worker).json()["size"] == 7  # a retry after a lost answer
    assert ship(agent, remote_attempt, 7, b"step 2\n", name=worker).json()["size"] == 14
    assert ship(agent, remote_attempt, 30, b"later\n", name=worker).json()["size"] == 14  # a gap: resume at 14

    response = clients["alice"].get(f"/api/v1/agent/logs/{remote_attempt.pk}/1/")
    assert response.content == b"step 1\nstep 2\n"
    assert response["X-Log-Source"] == "shipped"


def test_an_agent_may_ship_logs_only_of_attempts_on_its_own_worker(clients, remote_attempt, settings):
    placed_on = Attempt.objects.get().worker.name
    other = "w2" if placed_on == "w1" else "w1"
    response = ship(agent_client(other), remote_attempt, 0, b"forged\n", name=other)
    assert response.status_code == 403 and response.json()["code"] == "PERMISSION_DENIED"
    assert ship(agent_client(placed_on), remote_attempt, 0, b"x", name=other).status_code == 403  # impersonation
    assert ship(clients["alice"], remote_attempt, 0, b"x", name=placed_on).status_code == 403  # people cannot
    assert not (settings.SHIPPED_LOG_DIR / str(remote_attempt.pk) / "1.log").exists()


def test_a_shipped_log_is_cut_at_the_bound_and_says_so(clients, remote_attempt, settings):
    settings.TASK_LOG_MAX_BYTES = 10
    worker = Attempt.objects.get().worker.name
    agent = agent_client(worker)
    assert ship(agent, remote_attempt, 0, b"0123456", name=worker).json() == {"size": 7, "truncated": False}
    assert ship(agent, remote_attempt, 7, b"789abcdef", name=worker).json() == {"size": 16, "truncated": True}
    assert ship(agent, remote_attempt, 16, b"more", name=worker).json()["truncated"] is True
    text = clients["alice"].get(f"/api/v1/agent/logs/{remote_attempt.pk}/1/").content.decode()
    assert text.startswith("0123456789\n[iris] log cut at 10 bytes") and "more" not in text


@pytest.mark.parametrize("change", [{"data": "not base64!"}, {"offset": -1}, {"attempt": 9}])
def test_a_bad_log_chunk_is_refused(remote_attempt, change):
    worker = Attempt.objects.get().worker.name
    body = {"name": worker, "task": remote_attempt.pk, "attempt": 1, "offset": 0, "data": "", **change}
    response = agent_client(worker).post("/api/v1/agent/logs/", body, format="json")
    assert response.status_code in (400, 404)
    assert response.json()["code"] in ("INVALID_ARGUMENT", "NOT_FOUND")
