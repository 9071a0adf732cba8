"""The attempt's supervisor run by an ordinary user (``scheduler/agent/supervise.py`` needs only
the standard library): through an unprivileged user namespace the attempt still gets a PID
namespace of its own, so processes that leave its process group end with it."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scheduler.agent.process import SUPERVISOR
from scheduler.agent.supervise import attempt_members

NOBODY = pwd.getpwnam("nobody")
# An interpreter an ordinary user may run (the tests' own may live in root's home).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces: Linux only"),
    pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="runs the supervisor as nobody: needs root"),
]


# This run's own marker: another run of these tests on the host (CI runs two side by side)
# marks its processes with another.
KEY = f"test{os.getpid()}:7-1"


def supervise_as_nobody(folder: Path, script: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            SYSTEM_PYTHON,
            "-I",
            str(SUPERVISOR),
            "--parent",
            str(os.getpid()),
            "--key",
            KEY,
            *options,
            "--",
            "sh",
            "-c",
            script,
        ],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "IRIS_ATTEMPT_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=30,
        user=NOBODY.pw_uid,
        group=NOBODY.pw_gid,
        extra_groups=[],
    )


@pytest.fixture
def folder():
    path = Path(tempfile.mkdtemp(prefix="iris-supervisor-"))
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_ordinary_users_attempt_gets_a_pid_namespace_and_its_escaped_processes_end_with_it(folder):
    script = "setsid sleep 300 & ( sleep 300 & ) & nohup sleep 300 > /dev/null 2>&1 & echo $$; sleep 0.5"

    result = supervise_as_nobody(folder, script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2"]  # the command is pid 2 of its namespace (init is 1)
    assert attempt_members(key=KEY) == []


def test_without_a_namespace_the_supervisor_ends_the_marked_processes_that_left_its_group(folder):
    script = "setsid sleep 300 & ( sleep 300 & ) & nohup sleep 300 > /dev/null 2>&1 & echo $$; sleep 0.5"

    result = supervise_as_nobody(folder, script, "--no-pid-namespace")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() != ["2"]
    assert attempt_members(key=KEY) == []
