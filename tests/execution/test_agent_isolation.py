"""What a task can reach of its agent, and what outlives an agent: real agents, real processes.

- A root agent runs tasks as the task user: a task that reads the agent's token file and its
  ``/proc/<pid>/environ`` gets "permission denied" and never sees the token.
- A non-dumpable agent's ``/proc/<pid>/environ`` is closed to its own uid; a scrubbed variable
  is gone from it.
- A forking task (``sh -c 'sleep 300 & ...'``) dies with an agent killed with SIGKILL; what a
  previous life left running is ended by the restarted agent before it reports, and the attempt
  is reported worker-lost with that reason; a task's background child does not outlive it.
"""

from __future__ import annotations

import os
import re
import pwd
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scheduler.jobs.submit import submit_job
from scheduler.agent.supervise import proc_stat
from tests.execution.test_end_to_end import attempt, attempt_state, cluster, people, process_gone  # noqa: F401
from tests.integration.subprocesses import ROOT, project_env, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux only"),
]

IS_ROOT = os.geteuid() == 0


def alive(pid: int) -> bool:
    return not process_gone(pid)


def read_pid(path: Path) -> int:
    assert wait_for(lambda: path.exists() and path.read_text().strip(), timeout=10), f"{path} never written"
    return int(path.read_text())


@pytest.mark.skipif(not IS_ROOT, reason="the task-user mode needs a root agent; the same-user mode is tested below")
def test_a_task_of_a_root_agent_cannot_read_its_token_file_or_its_environment(cluster, people):  # noqa: F811
    # The token file as deployed: 0600, owned by the agent's user, in a directory anyone may enter.
    folder = Path(tempfile.mkdtemp(prefix="iris-agent-secret-"))
    os.chmod(folder, 0o755)
    token_file = folder / "token"
    token_file.write_text(cluster.token)
    os.chmod(token_file, 0o600)
    try:
        agent = cluster.agent(
            "w1", task_user="nobody", token_args=["--token-file", str(token_file)],
            env={"IRIS_AGENT_TOKEN": cluster.token},
        )
        script = (
            f"id -un; cat {token_file}; echo token-file-exit=$?; "
            f"cat /proc/{agent.pid}/environ; echo environ-exit=$?; "
            f"head -c 64 /proc/{agent.pid}/mem; echo mem-exit=$?"
        )
        job = submit_job(
            people["alice"], {"name": "snoop", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]}
        )
        assert cluster.pump(lambda: attempt_state(job) in {"succeeded", "failed"}), cluster.logs()
        output = (cluster.log_dir / str(attempt(job).task_id) / "1.log").read_text()
    finally:
        token_file.unlink()
        folder.rmdir()
    assert output.splitlines()[0] == "nobody"
    assert "token-file-exit=1" in output and "environ-exit=1" in output and "mem-exit=1" in output, output
    assert cluster.token not in output
    assert output.count("Permission denied") == 3, output


PROBE = """
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
from scheduler.agent.credentials import make_non_dumpable, scrub_environment
if sys.argv[3] != "-":  # run as this uid (the interpreter may not be readable by it: drop late)
    uid, gid = map(int, sys.argv[3].split(":"))
    os.setgroups([]); os.setgid(gid); os.setuid(uid)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, as any process of its uid (setuid cleared it)
scrub_environment("IRIS_AGENT_TOKEN")
if sys.argv[2] == "non-dumpable":
    assert make_non_dumpable()
print("ready", flush=True)
sys.stdin.read()
"""
# Root may read any process (CAP_SYS_PTRACE), so as root both sides run as nobody.
NOBODY = pwd.getpwnam("nobody")
SAME_USER = {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid, "extra_groups": []} if IS_ROOT else {}


def probe(mode: str) -> subprocess.Popen:
    """A stand-in agent holding secrets in its environment."""
    uid = f"{NOBODY.pw_uid}:{NOBODY.pw_gid}" if IS_ROOT else "-"
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", PROBE, str(ROOT), mode, uid],
        env={"IRIS_AGENT_TOKEN": "token-in-env-123", "OTHER_SECRET": "other-secret-456", "PATH": os.defpath},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def read_as(pid: int, **as_user) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["cat", f"/proc/{pid}/environ"], capture_output=True, text=True, timeout=10, **as_user
    )


def test_scrubbed_token_is_gone_from_the_agents_proc_environ():
    agent = probe("dumpable")
    try:
        environ = Path(f"/proc/{agent.pid}/environ").read_bytes()
    finally:
        agent.communicate("")
    assert b"other-secret-456" in environ  # the file is readable here: what is missing was scrubbed
    assert b"token-in-env-123" not in environ


def test_a_same_user_process_cannot_read_a_non_dumpable_agents_environment():
    plain = probe("dumpable")
    try:
        control = read_as(plain.pid, **SAME_USER)
    finally:
        plain.communicate("")
    assert "other-secret-456" in control.stdout  # a dumpable process of the same uid is an open book

    agent = probe("non-dumpable")
    try:
        snoop = read_as(agent.pid, **SAME_USER)
    finally:
        agent.communicate("")
    assert snoop.returncode != 0 and "Permission denied" in snoop.stderr
    assert "other-secret-456" not in snoop.stdout


FORKING = "sleep 300 & echo $! > {dir}/bg; echo $PPID > {dir}/leader; echo $$ > {dir}/fg; sleep 300"


def test_a_forking_task_dies_with_an_agent_killed_with_sigkill(cluster, people, tmp_path):  # noqa: F811
    agent = cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {"name": "forks", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", FORKING.format(dir=tmp_path)]},
    )
    assert cluster.pump(lambda: attempt_state(job) == "running"), cluster.logs()
    pids = [read_pid(tmp_path / "fg"), read_pid(tmp_path / "bg")]
    assert all(alive(pid) for pid in pids)

    os.kill(agent.pid, signal.SIGKILL)

    assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5), [proc_stat(p) for p in pids]


def test_a_restarted_agent_ends_what_its_previous_life_left_running_before_it_reports(cluster, people, tmp_path,  # noqa: F811
                                                                                      settings):
    agent = cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {"name": "forks", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", FORKING.format(dir=tmp_path)]},
    )
    assert cluster.pump(lambda: attempt_state(job) == "running"), cluster.logs()
    pids = [read_pid(tmp_path / "fg"), read_pid(tmp_path / "bg")]
    # The worst case: the agent and the attempt's session leader die together (the leader cannot
    # kill its group any more), so the task's processes outlive both.
    os.kill(agent.pid, signal.SIGSTOP)
    os.kill(read_pid(tmp_path / "leader"), signal.SIGKILL)
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=10)
    assert all(alive(pid) for pid in pids)
    # The restart, not the server's missed-heartbeat check, must end the first attempt: on a
    # loaded host the restarted agent's start (it sets up Django) outlasts the tests' 3 s grace.
    settings.WORKER_GRACE_SECONDS = 300

    cluster.agent("w1")

    def lost() -> bool:
        found = attempt(job)
        return found.state == "worker_failed" and "restarted" in found.error

    assert cluster.pump(lost, timeout=60), cluster.logs()
    assert not any(alive(pid) for pid in pids)
    # sh, its background sleep and its foreground one (which some shells exec instead of forking)
    assert re.search(r"restarted and ended [23] process\(es\) its previous run had left running$", attempt(job).error)
    second_life = sorted(cluster.tmp_path.glob("agent-w1-*.log"))[-1]
    assert wait_for(lambda: "w1 registered" in second_life.read_text(), timeout=5), second_life.read_text()
    text = second_life.read_text()
    assert text.index("process(es) its previous run") < text.index("w1 registered"), text


def test_what_a_task_leaves_running_when_it_exits_is_killed(cluster, people, tmp_path):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {"name": "leaves", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", f"sleep 300 & echo $! > {tmp_path}/bg"]},
    )
    assert cluster.pump(lambda: attempt_state(job) == "succeeded"), cluster.logs()
    assert wait_for(lambda: process_gone(read_pid(tmp_path / "bg")), timeout=5)


def test_an_agent_refuses_to_start_when_its_task_user_does_not_exist(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "iris_worker", "--name", "w1", "--token", "t", "--cpu", "1", "--memory", "1Gi",
         "--task-user", "no-such-iris-user"],
        cwd=ROOT, env=project_env(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    expected = "the task user 'no-such-iris-user' does not exist" if IS_ROOT else "only when the agent runs as root"
    assert expected in result.stderr
