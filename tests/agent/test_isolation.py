"""What a task can reach of its agent, and what outlives an agent: real agents, real processes.

- A root agent runs tasks as the task user: a task that reads the agent's token file and its
  ``/proc/<pid>/environ`` gets "permission denied" and never sees the token.
- A non-dumpable agent's ``/proc/<pid>/environ`` is closed to its own uid; a scrubbed variable
  is gone from it.
- No process of an attempt outlives it, ``setsid``, double forks and ``nohup`` included, with a
  PID namespace per attempt and without one: not the agent's ``kill -9``, not the agent and the
  attempt's supervisor killed together (the restarted agent ends what is left before it
  reports), not the agent staying down past the grace (namespace), not a cancel, not the
  command's own exit. Each escaped process writes the time every 50 ms; none may write after
  attempt 2 starts.
"""

from __future__ import annotations

import os
import re
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scheduler.agent.supervise import attempt_members, proc_stat
from scheduler.jobs.cancel import cancel_job
from scheduler.jobs.submit import submit_job
from tests.execution.test_end_to_end import attempt, attempt_state, cluster, host_pid, people, process_gone  # noqa: F401
from tests.integration.subprocesses import ROOT, project_env, wait_for
from tests.personas import make_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.e2e,
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
            "w1",
            task_user="nobody",
            token_args=["--token-file", str(token_file)],
            env={"IRIS_AGENT_TOKEN": cluster.token},
        )
        script = (
            f"id -un; cat {token_file}; echo token-file-exit=$?; "
            f"cat /proc/{agent.pid}/environ; echo environ-exit=$?; "
            f"head -c 64 /proc/{agent.pid}/mem; echo mem-exit=$?"
        )
        job = submit_job(people["alice"], {"name": "snoop", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]})
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
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def read_as(pid: int, **as_user) -> subprocess.CompletedProcess:
    return subprocess.run(["cat", f"/proc/{pid}/environ"], capture_output=True, text=True, timeout=10, **as_user)


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


# A task whose processes leave its process group three ways; each appends the time (ns since the
# epoch) to a file of its attempt every 50 ms, for as long as it lives.
WRITERS = ("setsid", "double-fork", "nohup")
MODES = {"namespace": (), "no namespace": ("--no-pid-namespace",)}


def escaping(folder: Path) -> list[str]:
    """A task whose processes leave its process group three ways; each appends the time (ns since
    the epoch) to a file of its own every 50 ms for as long as it lives."""
    loop = f"while true; do date +%s%N >> {folder}/$1-$IRIS_ATTEMPT; sleep 0.05; done"
    script = (
        f"setsid sh -c '{loop}' sh setsid & "
        f"( sh -c '{loop}' sh double-fork & ) & "
        f"nohup sh -c '{loop}' sh nohup > /dev/null 2>&1 & "
        f"date +%s%N > {folder}/started-$IRIS_ATTEMPT; sleep 300"
    )
    return ["sh", "-c", script]


def attempt_key_of(cluster, job, number: int = 1) -> str:
    return cluster.marker(job, number)


def marked(key: str) -> list[int]:
    """Live processes carrying the attempt's marker (the agent's supervisor included)."""
    return attempt_members(key=key)


def supervisor_of(key: str) -> int:
    for pid in marked(key):
        if b"supervise.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError(f"no supervisor of {key}")


def writers_running(folder: Path, number: int) -> bool:
    """Every writer of attempt ``number`` has written a time (its shell creates the file before
    ``date`` writes: a writer killed in between would leave it empty)."""
    return all(_written(folder / f"{name}-{number}") for name in WRITERS)


def _written(path: Path) -> bool:
    try:
        return bool(path.read_text().split())
    except FileNotFoundError:
        return False


def last_write_ns(folder: Path, number: int) -> int:
    """The latest time any escaped process of attempt ``number`` wrote."""
    return max(int((folder / f"{name}-{number}").read_text().split()[-1]) for name in WRITERS)


def assert_attempt_1_silent_after_attempt_2_started(folder: Path) -> None:
    # The shell creates the file before ``date`` writes into it: wait for the time itself.
    started_file = folder / "started-2"
    assert wait_for(lambda: started_file.exists() and started_file.read_text().strip(), timeout=30)
    started = int(started_file.read_text())
    time.sleep(0.5)  # the writers write every 50 ms: a survivor would have written by now
    assert last_write_ns(folder, 1) < started


def run_escaping(cluster, people, folder: Path):  # noqa: F811
    job = submit_job(people["alice"], {"name": "escapes", "cpu": 1, "memory": "1Gi", "command": escaping(folder)})
    assert cluster.pump(lambda: attempt_state(job) == "running"), cluster.logs()
    assert wait_for(lambda: writers_running(folder, 1), timeout=10), cluster.logs()
    return job


@pytest.mark.parametrize("mode", MODES)
def test_no_process_of_an_attempt_outlives_its_agent_killed_with_sigkill(cluster, people, tmp_path, settings, mode):  # noqa: F811
    settings.WORKER_GRACE_SECONDS = 300  # attempt 2 follows the restart's report, on the same worker
    agent = cluster.agent("w1", extra=MODES[mode])
    job = run_escaping(cluster, people, tmp_path)
    key = attempt_key_of(cluster, job)

    os.kill(agent.pid, signal.SIGKILL)

    assert wait_for(lambda: not marked(key), timeout=5), [proc_stat(p) for p in marked(key)]
    cluster.agent("w1", extra=MODES[mode])
    assert cluster.pump(lambda: attempt_state(job, 2) == "running", timeout=60), cluster.logs()
    assert_attempt_1_silent_after_attempt_2_started(tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_a_restarted_agent_ends_what_its_previous_life_left_running_before_it_reports(
    cluster,
    people,
    tmp_path,
    settings,
    mode,  # noqa: F811
):
    settings.WORKER_GRACE_SECONDS = 300  # the restart, not the missed-heartbeat check, ends attempt 1
    agent = cluster.agent("w1", extra=MODES[mode])
    job = run_escaping(cluster, people, tmp_path)
    key = attempt_key_of(cluster, job)
    # The worst case: the agent and the attempt's supervisor die together (the supervisor cannot
    # end the attempt any more).
    os.kill(agent.pid, signal.SIGSTOP)
    os.kill(supervisor_of(key), signal.SIGKILL)
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=10)
    if mode == "namespace":  # the namespace's init died with the supervisor, and all of it with init
        assert wait_for(lambda: not marked(key), timeout=5), [proc_stat(p) for p in marked(key)]
    else:
        assert len(marked(key)) >= 3 and writers_running(tmp_path, 1)

    cluster.agent("w1", extra=MODES[mode])

    def lost() -> bool:
        found = attempt(job)
        return found.state == "worker_failed" and "restarted" in found.error

    assert cluster.pump(lost, timeout=60), cluster.logs()
    assert not marked(key)
    if mode == "no namespace":  # the three writers (and whatever shells they run in)
        assert re.search(
            r"restarted and ended ([3-9]|\d\d) process\(es\) its previous run had left running$", attempt(job).error
        ), attempt(job).error
    second_life = sorted(cluster.tmp_path.glob("agent-w1-*.log"))[-1]
    assert wait_for(lambda: "w1 registered" in second_life.read_text(), timeout=5), second_life.read_text()
    text = second_life.read_text()
    assert text.index("restarted") < text.index("w1 registered"), text
    assert cluster.pump(lambda: attempt_state(job, 2) == "running", timeout=60), cluster.logs()
    assert_attempt_1_silent_after_attempt_2_started(tmp_path)


def test_an_attempt_whose_agent_stays_down_past_the_grace_ends_before_attempt_2_runs_elsewhere(
    cluster,
    people,
    tmp_path,  # noqa: F811
):
    agents = {"w1": cluster.agent("w1", cpu=1), "w2": cluster.agent("w2", cpu=1)}
    job = run_escaping(cluster, people, tmp_path)
    key = attempt_key_of(cluster, job)
    lost = attempt(job).worker.name
    os.kill(agents[lost].pid, signal.SIGSTOP)
    os.kill(supervisor_of(key), signal.SIGKILL)
    os.kill(agents[lost].pid, signal.SIGKILL)

    assert cluster.pump(lambda: attempt_state(job, 2) == "running", timeout=30), cluster.logs()
    assert attempt(job, 2).worker.name != lost
    assert_attempt_1_silent_after_attempt_2_started(tmp_path)
    assert not marked(key)


@pytest.mark.parametrize("mode", MODES)
def test_cancel_ends_every_process_of_the_attempt_before_it_is_reported_finished(cluster, people, tmp_path, mode):  # noqa: F811
    cluster.agent("w1", extra=MODES[mode])
    job = run_escaping(cluster, people, tmp_path)
    key = attempt_key_of(cluster, job)

    cancel_job(people["alice"], job.name)

    assert cluster.pump(lambda: attempt(job).finished_at is not None), cluster.logs()
    finished_ns = time.time_ns()
    assert not marked(key)
    time.sleep(0.5)
    assert last_write_ns(tmp_path, 1) < finished_ns


@pytest.mark.parametrize("mode", MODES)
def test_what_a_task_leaves_running_when_it_exits_is_killed(cluster, people, tmp_path, mode):  # noqa: F811
    cluster.agent("w1", extra=MODES[mode])
    script = "setsid sleep 300 & ( sleep 300 & ) &"
    job = submit_job(people["alice"], {"name": "leaves", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]})

    assert cluster.pump(lambda: attempt_state(job) == "succeeded"), cluster.logs()

    assert wait_for(lambda: not marked(attempt_key_of(cluster, job)), timeout=5)


def test_an_agent_refuses_to_start_when_its_task_user_does_not_exist(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "iris_worker",
            "--name",
            "w1",
            "--token",
            "t",
            "--cpu",
            "1",
            "--memory",
            "1Gi",
            "--task-user",
            "no-such-iris-user",
        ],
        cwd=ROOT,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    expected = "the task user 'no-such-iris-user' does not exist" if IS_ROOT else "only when the agent runs as root"
    assert expected in result.stderr


@pytest.fixture
def open_folder():
    """A directory anyone may enter, as a data directory is (pytest's tmp dirs lie in a 0700 one)."""
    folder = Path(tempfile.mkdtemp(prefix="iris-open-data-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="a uid per attempt needs a root agent")
def test_alices_task_cannot_read_bobs_logs_working_files_or_environment_nor_signal_his_processes(
    cluster,
    people,
    settings,
    open_folder,  # noqa: F811
):
    settings.TASK_LOG_DIR = cluster.log_dir = open_folder / "logs"
    settings.SHIPPED_LOG_DIR = open_folder / "shipped-logs"
    work = open_folder / "work"
    cluster.agent("w1", task_user="", extra=("--work-dir", str(work)))  # a root agent's default identity
    bob = make_user("bob")
    victim = submit_job(
        bob,
        {
            "name": "victim",
            "cpu": 1,
            "memory": "1Gi",
            "command": [
                "sh",
                "-c",
                "echo bob-work-secret > victim-secret.txt; echo $$ > pid; echo bob-log-secret; sleep 100",
            ],
        },
    )
    assert cluster.pump(lambda: attempt_state(victim) == "running"), cluster.logs()
    task = attempt(victim).task_id
    bob_work = work / f"{task}-1"
    bob_log, bob_shipped = settings.TASK_LOG_DIR / str(task) / "1.log", settings.SHIPPED_LOG_DIR / str(task) / "1.log"
    assert wait_for(lambda: bob_shipped.exists(), timeout=10), cluster.logs()
    bob_pid = host_pid(cluster, read_pid(bob_work / "pid"), victim)
    assert "bob-log-secret" in bob_log.read_text() and "bob-log-secret" in bob_shipped.read_text()

    attacks = {
        "log": f"cat {bob_log}",
        "shipped": f"cat {bob_shipped}",
        "work": f"cat {bob_work}/victim-secret.txt",
        "environ": f"cat /proc/{bob_pid}/environ",
        "signal": f"kill -TERM {bob_pid}",
    }
    script = "; ".join(
        f"echo '>>> {name}'; {line} 2>&1; code=$?; echo; echo \"<<< $code\"" for name, line in attacks.items()
    )
    snoop = submit_job(people["alice"], {"name": "snoop", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", script]})
    assert cluster.pump(lambda: attempt_state(snoop) in {"succeeded", "failed"}), cluster.logs()

    output = (settings.TASK_LOG_DIR / str(attempt(snoop).task_id) / "1.log").read_text()
    results = dict(re.findall(r">>> (\w+)\n.*?<<< (\d+)", output, re.S))
    assert set(results) == set(attacks), output
    assert [name for name, code in results.items() if code == "0"] == [], output
    for secret in ("bob-work-secret", "bob-log-secret", "/bob/victim"):
        assert secret not in output, output
    assert attempt_state(victim) == "running" and not process_gone(bob_pid)


def test_a_task_sees_none_of_its_agents_environment_but_path_and_its_own_variables(cluster, people):  # noqa: F811
    cluster.agent("w1", env={"PGPASSWORD": "db-secret-789", "AWS_SECRET_ACCESS_KEY": "cloud-secret-012"})
    job = submit_job(people["alice"], {"name": "env", "cpu": 1, "memory": "1Gi", "command": ["env"]})

    assert cluster.pump(lambda: attempt_state(job) == "succeeded"), cluster.logs()

    seen = dict(
        line.split("=", 1) for line in (cluster.log_dir / str(attempt(job).task_id) / "1.log").read_text().splitlines()
    )
    assert "db-secret-789" not in seen.values() and "cloud-secret-012" not in seen.values()
    assert set(seen) - {"PATH", "LANG", "LC_ALL", "TZ"} == {
        "IRIS_TASK_ID",
        "IRIS_JOB_ID",
        "IRIS_TASK_INDEX",
        "IRIS_ATTEMPT",
        "IRIS_BAND",
        "IRIS_WORKER",
        "IRIS_ATTEMPT_KEY",
        "HOME",
        "TMPDIR",
        "USER",
        "LOGNAME",
    }, seen
    assert seen["IRIS_TASK_ID"] == "/alice/env/0" and "PATH" in seen


@pytest.mark.skipif(not IS_ROOT, reason="the account identity needs a root agent")
def test_the_account_identity_runs_each_attempt_as_its_owners_unix_account(cluster, people, open_folder):  # noqa: F811
    # Accounts every Debian host has, named as Iris users: no account is created on the host.
    accounts = {name: pwd.getpwnam(name) for name in ("daemon", "nobody")}
    work = open_folder / "work"
    cluster.agent("w1", task_user="", extra=("--task-identity", "account", "--work-dir", str(work)))
    jobs = {
        name: submit_job(
            make_user(name),
            {"name": f"as-{name}", "cpu": 1, "memory": "1Gi", "command": ["sh", "-c", "id -u; id -g; stat -c %u:%a ."]},
        )
        for name in accounts
    }
    stranger = submit_job(people["alice"], {"name": "no-account", "cpu": 1, "memory": "1Gi", "command": ["true"]})
    finished = {"succeeded", "failed"}
    assert cluster.pump(lambda: all(attempt_state(j) in finished for j in [*jobs.values(), stranger])), cluster.logs()

    for name, job in jobs.items():
        entry = accounts[name]
        output = (cluster.log_dir / str(attempt(job).task_id) / "1.log").read_text().split()
        assert attempt_state(job) == "succeeded", (name, output)
        assert output == [str(entry.pw_uid), str(entry.pw_gid), f"{entry.pw_uid}:700"], name
    assert attempt_state(stranger) == "failed"
    assert "no Unix account 'alice'" in (attempt(stranger).error or ""), attempt(stranger).error
