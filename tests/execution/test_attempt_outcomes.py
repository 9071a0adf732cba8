"""How an attempt's end is reported, with real agents and real processes: a task killed by a
signal is reported as that signal (SIGKILL included), with nothing of the agent's in its log."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scheduler.jobs.submit import submit_job
from tests.execution.test_end_to_end import attempt, attempt_state, cluster, people  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's supervisor: Linux only"),
]


def log_of(cluster, job) -> str:  # noqa: F811
    return (cluster.log_dir / str(attempt(job).task_id) / "1.log").read_text()


@pytest.mark.parametrize("signal_number, name", [(9, "SIGKILL"), (15, "SIGTERM"), (11, "SIGSEGV")])
def test_a_task_killed_by_a_signal_is_reported_as_that_signal(cluster, people, signal_number, name):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {
            "name": f"dies-{signal_number}",
            "cpu": 1,
            "memory": "1Gi",
            "command": ["sh", "-c", f"echo before; kill -{signal_number} $$"],
        },
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed"), cluster.logs()

    found = attempt(job)
    assert (found.exit_code, found.error) == (-signal_number, f"killed by signal {signal_number} ({name})")
    assert log_of(cluster, job) == "before\n"


# Allocates (and touches) 16 MiB every 20 ms until it has 2 GiB or memory is refused.
GROWING = """
import time
held = []
for _ in range(128):
    held.append(b"x" * (16 << 20))
    time.sleep(0.02)
"""
# Two processes that each hold 200 MiB, each under its own address-space limit of 256 MiB.
TWO_HOLDERS = """
import os, time
os.fork()
held = b"x" * (200 << 20)
time.sleep(30)
"""


def test_a_task_that_allocates_more_than_its_request_is_reported_out_of_memory(cluster, people):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"], {"name": "greedy", "cpu": 1, "memory": "256Mi", "command": [sys.executable, "-c", GROWING]}
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed", timeout=30), cluster.logs()

    assert attempt(job).error == "killed: out of memory (limit 256 MiB)"
    assert "MemoryError" in log_of(cluster, job)


@pytest.mark.parametrize(
    "allocation",
    [
        "bytearray(4 << 30)",  # Python: MemoryError
        "__import__('mmap').mmap(-1, 4 << 30)",  # C's ENOMEM as an OSError: Cannot allocate memory
    ],
)
def test_one_allocation_bigger_than_the_request_is_reported_out_of_memory(cluster, people, allocation):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {"name": "one-big", "cpu": 1, "memory": "256Mi", "command": [sys.executable, "-c", allocation]},
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed", timeout=30), cluster.logs()

    assert attempt(job).error == "killed: out of memory (limit 256 MiB)"


def test_processes_of_one_task_over_its_request_together_are_killed_as_out_of_memory(cluster, people):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"], {"name": "pair", "cpu": 1, "memory": "256Mi", "command": [sys.executable, "-c", TWO_HOLDERS]}
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed", timeout=30), cluster.logs()

    found = attempt(job)
    assert (found.error, found.exit_code) == ("killed: out of memory (limit 256 MiB)", -9)
    assert log_of(cluster, job).endswith("[iris-agent] killed: out of memory (limit 256 MiB)\n")


def test_a_task_within_its_request_that_fails_is_reported_by_its_exit_code(cluster, people):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {
            "name": "modest",
            "cpu": 1,
            "memory": "256Mi",
            "command": [sys.executable, "-c", "held = b'x' * (64 << 20); raise SystemExit(3)"],
        },
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed", timeout=30), cluster.logs()

    assert attempt(job).error == "exited with code 3"


@pytest.mark.skipif(
    not os.environ.get("IRIS_TEST_MEMORY_CGROUP"),
    reason="IRIS_TEST_MEMORY_CGROUP names no cgroup directory delegated to the tests",
)
def test_an_agent_with_a_delegated_cgroup_reports_the_kernels_oom_kill_as_out_of_memory(cluster, people):  # noqa: F811
    parent = Path(os.environ["IRIS_TEST_MEMORY_CGROUP"])
    cluster.agent("w1", extra=("--memory-cgroup", str(parent)))
    job = submit_job(
        people["alice"], {"name": "greedy", "cpu": 1, "memory": "256Mi", "command": [sys.executable, "-c", GROWING]}
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed", timeout=30), cluster.logs()

    assert attempt(job).error == "killed: out of memory (limit 256 MiB)"
    assert not list(parent.glob("iris-*"))  # the attempt's own cgroup is gone with it
