"""End to end on the local backend with real processes: worker agents (``manage.py
iris_worker``) talk to a live server; tasks run as their subprocesses.

The test thread plays the scheduler's part (tick, drain, worker check) in a loop, so each step
is deterministic; one test runs the real Celery worker with beat instead.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.utils import timezone

from scheduler.agent.process import agent_tag, attempt_marker
from scheduler.agent.supervise import carries_marker
from scheduler.execution.dispatcher import LEASE_NAME, drain
from scheduler.execution.enrolment import issue_worker_credential
from scheduler.execution.logs import read_tail
from scheduler.execution.workers import check_workers
from scheduler.jobs.submit import submit_job
from scheduler.models import Attempt, DispatchIntent, Job, SchedulerLease, Task, Worker
from scheduler.tick.run import run_tick
from tests.conftest import REDIS_TEST_URL
from tests.integration.subprocesses import ROOT, project_env, start, stop, wait_for
from tests.personas import make_user, token_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

HEARTBEAT = "0.2"


class Cluster:
    """Agents against the live server, and the scheduler's loop driven from the test."""

    def __init__(self, url: str, tmp_path: Path, log_dir: Path):
        self.url = url
        self.tmp_path = tmp_path
        self.log_dir = log_dir
        self.agents: dict[str, subprocess.Popen] = {}
        self.credentials: dict[str, str] = {}

    def credential(self, name: str) -> str:
        """Worker ``name``'s own credential, minted as an operator would, once per test."""
        if name not in self.credentials:
            self.credentials[name] = issue_worker_credential(name, by="tests")
        return self.credentials[name]

    @property
    def token(self) -> str:
        """The credential of worker w1, the worker most tests run."""
        return self.credential("w1")

    def agent(
        self,
        name: str,
        *,
        cpu: int = 2,
        memory: str = "4Gi",
        task_user: str | None = None,
        token_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> subprocess.Popen:
        """Start an agent. Its tasks run as the tests' own user unless ``task_user`` says
        otherwise (these tests' markers live in the private pytest tmp dir); ``task_user=""``
        leaves the agent's default identity."""
        args = [
            "manage.py",
            "iris_worker",
            "--name",
            name,
            "--server",
            self.url,
            *(token_args if token_args is not None else ["--token", self.credential(name)]),
            "--cpu",
            str(cpu),
            "--memory",
            memory,
            "--heartbeat-seconds",
            HEARTBEAT,
            "--log-dir",
            str(self.log_dir),
            *(["--task-user", task_user or getpass.getuser()] if task_user != "" else []),
            *extra,
        ]
        log_file = self.tmp_path / f"agent-{name}.log"
        if name in self.agents:  # a restart: keep the first life's log
            log_file = self.tmp_path / f"agent-{name}-{len(list(self.tmp_path.glob(f'agent-{name}*.log')))}.log"
        process = start(args, project_env(self.tmp_path, **(env or {})), log_file)
        self.agents[name] = process
        assert wait_for(lambda: Worker.objects.filter(name=name, healthy=True).exists(), timeout=20), self.logs()
        return process

    def marker(self, job: Job, number: int = 1) -> str:
        """``IRIS_ATTEMPT_KEY`` of the job's attempt ``number``: its agent (named by its state
        directory in this test's data dir) and the attempt."""
        found = attempt(job, number)
        return attempt_marker(agent_tag(self.tmp_path / "data" / "agents" / found.worker.name), found.task_id, number)

    def pump(self, predicate, timeout: float = 20) -> bool:
        """Tick, drain and check workers until ``predicate()`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run_tick()
            drain()
            check_workers()
            if predicate():
                return True
            time.sleep(0.1)
        return predicate()

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in sorted(self.tmp_path.glob("*.log")))

    def stop_all(self) -> None:
        for process in self.agents.values():
            stop(process, timeout=10)


@pytest.fixture
def cluster(live_server, tmp_path, settings):
    settings.TASK_LOG_DIR = tmp_path / "logs"
    settings.STOP_GRACE_SECONDS = 3
    settings.WORKER_GRACE_SECONDS = 3
    result = Cluster(live_server.url, tmp_path, settings.TASK_LOG_DIR)
    yield result
    result.stop_all()


@pytest.fixture
def people(transactional_db):
    return {"alice": make_user("alice"), "ada": make_user("ada", "admin")}


def attempt(job: Job, number: int = 1, index: int = 0) -> Attempt | None:
    return Attempt.objects.filter(task__job=job, task__index=index, number=number).first()


def attempt_state(job: Job, number: int = 1) -> str | None:
    found = attempt(job, number)
    return found.state if found else None


def process_gone(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (the container's init may not reap)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def host_pid(cluster: Cluster, pid_in_task: int, job: Job, number: int = 1) -> int:
    """The host's pid of a process of ``job``'s attempt ``number`` that knows itself as
    ``pid_in_task`` (its ``$$``, which counts in the attempt's PID namespace when it has one)."""
    key = cluster.marker(job, number)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not carries_marker(int(entry.name), key):
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        nspids = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if nspids and int(nspids[-1]) == pid_in_task:
            return int(entry.name)
    return pid_in_task  # gone, or never in a namespace of its own


def test_batch_task_gets_sigterm_when_preempted_and_retries_after_the_production_task(cluster, people, tmp_path):
    cluster.agent("w1", cpu=2)
    marker = tmp_path / "batch.marker"
    script = (
        f'trap "echo term-$IRIS_ATTEMPT >> {marker}; exit 0" TERM; '
        f"echo start-$IRIS_ATTEMPT-$IRIS_BAND >> {marker}; while true; do sleep 0.1; done"
    )
    batch = submit_job(
        people["alice"],
        {"name": "sweep", "priority": "batch", "cpu": 2, "memory": "1Gi", "command": ["sh", "-c", script]},
    )
    assert cluster.pump(lambda: attempt_state(batch) == "running"), cluster.logs()

    production = submit_job(
        people["ada"],
        {"name": "serve", "priority": "production", "cpu": 2, "memory": "1Gi", "command": ["sleep", "1"]},
    )
    assert cluster.pump(lambda: attempt_state(production) == "running"), cluster.logs()

    victim = attempt(batch)
    assert victim.state == "preempted" and victim.error == "Preempted by /ada/serve/0"
    assert victim.finished_at is not None
    assert marker.read_text().splitlines() == ["start-1-batch", "term-1"]
    # The preemptor started only once its victim's process had ended.
    assert attempt(production).started_at >= victim.finished_at
    assert Task.objects.get(job=batch).preemption_count == 1

    # The production task finishes; the batch task runs again, as attempt 2.
    assert cluster.pump(lambda: attempt_state(batch, 2) == "running"), cluster.logs()
    assert Job.objects.get(pk=production.pk).state == "succeeded"
    assert wait_for(lambda: "start-2-batch" in marker.read_text(), timeout=5)


def test_an_agent_killed_with_sigkill_loses_its_worker_and_the_task_retries_elsewhere(cluster, people, tmp_path):
    agents = {"w1": cluster.agent("w1", cpu=1), "w2": cluster.agent("w2", cpu=1)}
    script = f"echo $$ > {tmp_path}/pid-$IRIS_ATTEMPT; exec sleep 60"
    job = submit_job(people["alice"], {"name": "long", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]})
    assert cluster.pump(lambda: attempt_state(job) == "running"), cluster.logs()
    first = attempt(job)
    lost, other = first.worker.name, ({"w1", "w2"} - {first.worker.name}).pop()
    pid_file = tmp_path / "pid-1"
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=5)  # written, not only created
    pid = host_pid(cluster, int(pid_file.read_text()), job)
    assert not process_gone(pid)

    os.kill(agents[lost].pid, signal.SIGKILL)

    assert cluster.pump(lambda: attempt_state(job, 2) == "running", timeout=25), cluster.logs()
    first.refresh_from_db()
    assert first.state == "worker_failed" and first.finished_at is not None
    assert "no heartbeat" in first.error
    assert attempt(job, 2).worker.name == other
    assert Worker.objects.get(name=lost).healthy is False
    assert Task.objects.get(job=job).preemption_count == 1
    if sys.platform.startswith("linux"):  # PR_SET_PDEATHSIG: the lost agent's process died with it
        assert wait_for(lambda: process_gone(pid), timeout=5)


def heartbeats(worker: str, count: int = 3, timeout: float = 10) -> bool:
    """True once the agent of ``worker`` has heartbeated ``count`` more times. Each heartbeat
    also fetches the agent's orders, so whatever it would have started by then has started."""
    seen = [Worker.objects.get(name=worker).last_heartbeat]

    def more() -> bool:
        latest = Worker.objects.get(name=worker).last_heartbeat
        if latest != seen[-1]:
            seen.append(latest)
        return len(seen) > count

    return wait_for(more, timeout=timeout, interval=0.05)


CRASHING_DISPATCHER = """
import os
from scheduler.backends.local import LocalBackend
from scheduler.execution.dispatcher import drain

LocalBackend.start = lambda self, order: os._exit(9)  # dies between sending and recording
drain()
"""


def test_outbox_survives_a_dispatcher_crash_and_a_start_is_never_run_twice(cluster, people, tmp_path):
    cluster.agent("w1")
    marker = tmp_path / "starts"
    job = submit_job(
        people["alice"],
        {
            "name": "once",
            "cpu": 1,
            "memory": "1Gi",
            "command": ["sh", "-c", f"echo started >> {marker}; exec sleep 30"],
        },
    )
    run_tick()  # commits the START intent; nobody has dispatched it yet
    start_intent = DispatchIntent.objects.get(task__job=job, kind="start")
    # Heartbeats come and go (each asks for orders): nothing was delivered, nothing runs.
    assert heartbeats("w1"), cluster.logs()
    assert not marker.exists()
    start_intent.refresh_from_db()
    assert (start_intent.state, start_intent.tries) == ("pending", 0)

    crashed = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", CRASHING_DISPATCHER],
        cwd=ROOT,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == 9, crashed.stderr
    start_intent.refresh_from_db()
    assert (start_intent.state, start_intent.tries) == ("pending", 1)
    # The dead dispatcher's lease runs out; the next drain delivers the intent.
    SchedulerLease.objects.filter(name=LEASE_NAME).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert cluster.pump(lambda: attempt_state(job) == "running"), cluster.logs()
    start_intent.refresh_from_db()
    assert start_intent.state == "done" and DispatchIntent.objects.filter(task__job=job).count() == 1

    # The agent's acknowledgement is lost, and the same start is handed out again: it is ignored.
    started_at = attempt(job).started_at
    DispatchIntent.objects.filter(pk=start_intent.pk).update(state="delivered")
    assert wait_for(lambda: DispatchIntent.objects.get(pk=start_intent.pk).state == "done", timeout=10)
    # Beats after the acknowledgement: a second copy, had the agent started one, has run by now.
    assert heartbeats("w1"), cluster.logs()
    assert marker.read_text().splitlines() == ["started"]
    assert (attempt(job).state, attempt(job).started_at) == ("running", started_at)


@pytest.mark.redis
def test_celery_worker_and_beat_run_a_task_through_an_agent_to_success_and_its_log(cluster, people, tmp_path):
    redis.Redis.from_url(REDIS_TEST_URL).flushdb()
    celery = start(
        [
            "-m",
            "celery",
            "-A",
            "iris_web",
            "worker",
            "--beat",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        project_env(tmp_path, IRIS_TICK_SECONDS="1", IRIS_DISPATCH_SECONDS="1"),
        tmp_path / "celery.log",
    )
    try:
        cluster.agent("w1")
        job = submit_job(
            people["alice"],
            {"name": "hello", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", "echo hello from $IRIS_TASK_ID"]},
        )
        finished = wait_for(lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60)
    finally:
        stop(celery)
    assert finished, cluster.logs()
    task = Task.objects.get(job=job)
    response = token_client(people["alice"]).get(f"/api/v1/agent/logs/{task.pk}/1/")
    assert response.status_code == 200
    assert response.content.decode().strip() == "hello from /alice/hello/0"


def test_a_remote_agent_ships_its_task_log_so_the_log_survives_its_host(cluster, people, tmp_path, settings):
    """The agent writes to a directory the server never reads (another host's disk); the log
    still reaches the server, whole, before the attempt's final report, and outlives that disk."""
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    remote_disk = tmp_path / "remote-host-logs"
    cluster.log_dir = remote_disk
    cluster.agent("w1", cpu=1)
    lines = 3000  # ~30 KiB over several heartbeats and chunks
    script = f'i=0; while [ $i -lt {lines} ]; do echo "line $i of the remote task"; i=$((i+1)); done'
    job = submit_job(people["alice"], {"name": "remote", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]})

    assert cluster.pump(lambda: attempt_state(job) == "succeeded"), cluster.logs()
    first = attempt(job)
    shutil.rmtree(remote_disk)  # the agent's host is gone

    found = read_tail(first.task_id, 1, 1 << 20)
    assert found is not None and found.source == "shipped"
    written = found.text.splitlines()
    assert written[0] == "line 0 of the remote task" and f"line {lines - 1} of the remote task" in written
