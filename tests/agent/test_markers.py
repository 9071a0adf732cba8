"""Two agents on one host (of one cluster or of two: a demo beside a test run) never end each
other's attempts: an attempt's marker names its agent (its state directory)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scheduler.agent.process import end_attempt_processes
from scheduler.agent.state import AttemptState
from scheduler.agent.supervise import attempt_members

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_an_agent_ends_only_its_own_attempt_of_a_task_key_another_agent_also_runs(tmp_path):
    first, second = AttemptState(tmp_path / "agents" / "w1"), AttemptState(tmp_path / "other" / "w1")
    mine, theirs = first.marker(5, 1), second.marker(5, 1)
    assert mine != theirs and mine.endswith(":5-1") and AttemptState(tmp_path / "agents" / "w1").marker(5, 1) == mine
    sleepers = {
        marker: subprocess.Popen(["sleep", "60"], env={"PATH": os.defpath, "IRIS_ATTEMPT_KEY": marker})
        for marker in (mine, theirs)
    }
    try:
        assert attempt_members(key=mine) == [sleepers[mine].pid]
        assert end_attempt_processes(None, mine, None) == 1
        sleepers[mine].wait(timeout=5)
        assert sleepers[theirs].poll() is None and attempt_members(key=theirs) == [sleepers[theirs].pid]
    finally:
        for process in sleepers.values():
            process.kill()
            process.wait()
