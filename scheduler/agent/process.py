"""One attempt's process on a worker host: spawn, signal, reap.

Processes run in their own session (so a stop reaches the whole process group, shell children
included) and, on Linux, die with the agent (``PR_SET_PDEATHSIG``): an agent killed with SIGKILL
leaves no orphans running work the scheduler has already given up on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# prctl option: deliver a signal to this process when its parent dies.
PR_SET_PDEATHSIG = 1


def log_path(root: Path | str, task_pk: int, attempt: int) -> Path:
    """Where an attempt's output goes: ``<root>/<task pk>/<attempt>.log``."""
    return Path(root) / str(int(task_pk)) / f"{int(attempt)}.log"


def task_environment(order_env: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment without its own ``IRIS_*`` settings (a token must not leak into
    tasks), plus the task's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_") and k != "DJANGO_SETTINGS_MODULE"}
    env.update(order_env)
    return env


def _die_with_parent(parent_pid: int):
    libc = None
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:
            libc = None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent_pid:  # the agent died before prctl took effect
                os._exit(137)

    return preexec


class AttemptProcess:
    """A started attempt. ``returncode`` follows ``subprocess``: negative means killed by that signal."""

    def __init__(self, popen: subprocess.Popen, log_file: Path):
        self.popen = popen
        self.log_file = log_file
        self.kill_at: float | None = None

    @classmethod
    def spawn(cls, command: Sequence[str], env: Mapping[str, str], log_file: Path) -> AttemptProcess:
        """Start ``command``; raises OSError if it cannot be started."""
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab", buffering=0) as log:
            popen = subprocess.Popen(
                list(command),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        return cls(popen, log_file)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code once the process has ended; sends SIGKILL when the grace period is over."""
        code = self.popen.poll()
        if code is None and self.kill_at is not None and time.monotonic() >= self.kill_at:
            self._signal(signal.SIGKILL)
            self.kill_at = None
        return code

    def terminate(self, grace_seconds: float) -> None:
        """SIGTERM to the process group now, SIGKILL after ``grace_seconds`` (checked by ``poll``)."""
        if self.popen.poll() is not None or self.kill_at is not None:
            return
        self._signal(signal.SIGTERM)
        self.kill_at = time.monotonic() + max(grace_seconds, 0.0)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def note(self, text: str) -> None:
        """Append an agent line to the attempt's log, so people see why it stopped."""
        try:
            with open(self.log_file, "a", encoding="utf-8") as log:
                log.write(f"[iris-agent] {text}\n")
        except OSError:
            pass
