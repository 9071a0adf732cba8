"""One agent at a time owns a state dir: a second agent with the same worker name and state dir
would take the first's live attempts for leftovers and kill them (seen when a second `make run`
started in the same checkout while the first ran), so it refuses to start instead."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from scheduler.agent.state import AttemptState, StateDirInUse


def test_a_second_owner_of_a_state_dir_is_refused_with_the_dir_and_the_holder(tmp_path):
    first = AttemptState(tmp_path / "agents" / "cpu-1")
    first.take()

    with pytest.raises(StateDirInUse) as refused:
        AttemptState(tmp_path / "agents" / "cpu-1").take()
    assert str(tmp_path / "agents" / "cpu-1") in str(refused.value)
    assert f"pid {os.getpid()}" in str(refused.value)
    # Another worker's dir on the same host is its own.
    AttemptState(tmp_path / "agents" / "cpu-2").take()


def test_the_state_dir_is_free_again_once_its_agent_is_gone_however_it_ended(tmp_path):
    state_dir = tmp_path / "agents" / "cpu-1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from scheduler.agent.state import AttemptState; "
            f"AttemptState({str(state_dir)!r}).take(); print('taken', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "taken"
        with pytest.raises(StateDirInUse, match=f"pid {holder.pid}"):
            AttemptState(state_dir).take()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    AttemptState(state_dir).take()  # a killed agent's restart takes its dir (and ends its leftovers)
