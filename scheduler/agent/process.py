"""One attempt's process on a worker host: spawn, signal, reap.

Each attempt runs under its own session leader (``scheduler/agent/supervise.py``), whose pid is
the attempt's process group: a stop signals the whole group (shell children included), the
group is SIGKILLed when the agent dies (``PR_SET_PDEATHSIG`` on the leader, which then kills
its group: an agent killed with SIGKILL leaves no orphans running work the scheduler has
already given up on), and what the command leaves running when it exits is killed too.

When the agent runs as root, the command runs as the task user (``TaskUser``), so it cannot
read the agent's token file or its ``/proc/<pid>/environ``; its working directory is its own.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# prctl option: deliver a signal to this process when its parent dies.
PR_SET_PDEATHSIG = 1
# The attempt's session leader, run by path with ``python -I`` (it needs only the standard library).
SUPERVISOR = Path(__file__).resolve().with_name("supervise.py")


@dataclass(frozen=True)
class TaskUser:
    """The Unix user tasks run as when the agent runs as root."""

    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> TaskUser:
        """Raises KeyError when the system has no such user."""
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)


def work_path(root: Path | str, task_pk: int, attempt: int) -> Path:
    """An attempt's working directory: ``<root>/<task pk>-<attempt>``, removed when it ends."""
    return Path(root) / f"{int(task_pk)}-{int(attempt)}"


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
            # SIGHUP to the session leader, which SIGKILLs its whole group (supervise.py).
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
            if os.getppid() != parent_pid:  # the agent died before prctl took effect
                os._exit(137)

    return preexec


class AttemptProcess:
    """A started attempt. ``returncode`` follows ``subprocess``: negative means killed by that signal."""

    def __init__(self, popen: subprocess.Popen, log_file: Path, work_dir: Path | None = None):
        self.popen = popen
        self.log_file = log_file
        self.work_dir = work_dir
        self.kill_at: float | None = None

    @classmethod
    def spawn(
        cls,
        command: Sequence[str],
        env: Mapping[str, str],
        log_file: Path,
        *,
        work_dir: Path,
        user: TaskUser | None = None,
    ) -> AttemptProcess:
        """Start ``command`` in ``work_dir`` (created; owned by ``user``), as ``user`` when given;
        raises OSError if it cannot be started."""
        env = dict(env)
        if shutil.which(command[0], path=env.get("PATH", os.defpath)) is None and os.sep not in command[0]:
            raise FileNotFoundError(errno.ENOENT, "command not found", command[0])
        log_file.parent.mkdir(parents=True, exist_ok=True)
        work_dir.parent.mkdir(parents=True, exist_ok=True)
        work_dir.mkdir(mode=0o700, exist_ok=True)
        leader = [sys.executable, "-I", str(SUPERVISOR), "--parent", str(os.getpid())]
        if user is not None:
            os.chown(work_dir, user.uid, user.gid)
            leader += ["--uid", str(user.uid), "--gid", str(user.gid)]
            env.update({"HOME": str(work_dir), "USER": user.name, "LOGNAME": user.name})
        with open(log_file, "ab", buffering=0) as log:
            popen = subprocess.Popen(
                [*leader, "--", *command],
                cwd=work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        return cls(popen, log_file, work_dir)

    def remove_work_dir(self) -> None:
        """Delete the attempt's working directory (once it has ended)."""
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

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
