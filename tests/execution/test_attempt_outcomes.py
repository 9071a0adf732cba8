"""How an attempt's end is reported, with real agents and real processes: a task killed by a
signal is reported as that signal (SIGKILL included), with nothing of the agent's in its log."""

from __future__ import annotations

import sys

import pytest

from scheduler.jobs.submit import submit_job
from tests.execution.test_end_to_end import attempt, attempt_state, cluster, people  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's supervisor: Linux only"),
]


def log_of(cluster, job) -> str:  # noqa: F811
    return (cluster.log_dir / str(attempt(job).task_id) / "1.log").read_text()


@pytest.mark.parametrize("signal_number, name", [(9, "SIGKILL"), (15, "SIGTERM"), (11, "SIGSEGV")])
def test_a_task_killed_by_a_signal_is_reported_as_that_signal(cluster, people, signal_number, name):  # noqa: F811
    cluster.agent("w1")
    job = submit_job(
        people["alice"],
        {"name": f"dies-{signal_number}", "cpu": 1, "memory": "1Gi",
         "command": ["sh", "-c", f"echo before; kill -{signal_number} $$"]},
    )

    assert cluster.pump(lambda: attempt_state(job) == "failed"), cluster.logs()

    found = attempt(job)
    assert (found.exit_code, found.error) == (-signal_number, f"killed by signal {signal_number} ({name})")
    assert log_of(cluster, job) == "before\n"
