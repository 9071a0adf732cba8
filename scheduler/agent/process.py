"""One attempt's process on a worker host: who it runs as, spawn, signal, reap.

Each attempt runs under its own supervisor (``scheduler/agent/supervise.py``): in a PID namespace
of its own where the host allows one, as its own identity when the agent runs as root, under
its memory limit, with its output copied by the supervisor into a log file the task cannot open.

Identities (``IRIS_AGENT_TASK_IDENTITY``, see docs/operations.md, "Agent modes"):

- ``dynamic`` (a root agent's default): each attempt gets a uid of its own from
  ``IRIS_AGENT_UID_RANGE``, like systemd's ``DynamicUser``: free on the host (no process runs as
  it) and held for the attempt's life by a lock in ``UID_LOCK_DIR`` that every agent of the host
  shares; what the attempt left in ``/tmp``, ``/var/tmp`` and ``/dev/shm`` is removed when it ends.
- ``account``: the Unix account named as the job's Iris user (sites whose accounts come from
  LDAP), with its groups.
- ``user``: every attempt as one user (``IRIS_AGENT_TASK_USER``): tasks are not isolated from
  each other, only from the agent.
- ``agent``: an agent not run as root runs tasks as itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import errno
import fcntl
import json
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.agent.supervise import MARKER, PR_SET_PDEATHSIG, attempt_members, kill_until_gone, live_pids, process_uid

# The attempt's supervisor, run by path with ``python -I`` (it needs only the standard library).
SUPERVISOR = Path(__file__).resolve().with_name("supervise.py")
# Where the agents of a host hold the uids their attempts run as (one locked file per uid).
UID_LOCK_DIR = Path("/run/iris-agent/uids")
# Directories where a task may leave files that outlive its working directory.
SHARED_TMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
# The agent's variables a task sees (all others stay the agent's: credentials, database URLs).
PASSED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "TZ")


class IdentityError(Exception):
    """No identity could be found for an attempt (the message says why)."""


@dataclass(frozen=True)
class TaskUser:
    """A Unix identity tasks run as. ``own``: this uid is one attempt's alone, so every process
    running as it belongs to that attempt."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    own: bool = False
    lease: int | None = field(default=None, compare=False)  # a locked fd holding a dynamic uid

    @classmethod
    def named(cls, name: str) -> TaskUser:
        """Raises KeyError when the system has no such user."""
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)

    def release(self) -> None:
        """The agent's copy of the lease: the supervisor keeps its own for the attempt's life."""
        if self.lease is not None:
            os.close(self.lease)


class SharedIdentity:
    """Every attempt as one user, or as the agent itself (``None``)."""

    def __init__(self, user: TaskUser | None):
        self.user = user

    def for_attempt(self, order: Mapping) -> TaskUser | None:
        return self.user


class AccountIdentity:
    """Each attempt as the Unix account named as its job's Iris user."""

    def for_attempt(self, order: Mapping) -> TaskUser:
        name = str(order.get("user") or "")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise IdentityError(f"no Unix account {name!r} on this host (IRIS_AGENT_TASK_IDENTITY=account)") from None
        if entry.pw_uid == 0:
            raise IdentityError(f"the account {name!r} is root: attempts never run as root")
        return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)))


class DynamicIdentity:
    """Each attempt as a uid (and gid) of its own from ``first..last``."""

    def __init__(self, first: int, last: int, lock_dir: Path = UID_LOCK_DIR):
        if not 0 < first <= last:
            raise ValueError(f"a uid range is FIRST-LAST with 0 < FIRST <= LAST, got {first}-{last}")
        self.first, self.last = first, last
        self.lock_dir = Path(lock_dir)

    @classmethod
    def parse(cls, text: str) -> DynamicIdentity:
        first, sep, last = text.partition("-")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit():
            raise ValueError(f"a uid range is FIRST-LAST, e.g. 4194304-4259839; got {text!r}")
        return cls(int(first), int(last))

    def for_attempt(self, order: Mapping) -> TaskUser:
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        in_use = {process_uid(pid) for pid in live_pids()}
        size = self.last - self.first + 1
        start = random.randrange(size)  # spread uids, so one is seldom handed out again soon
        for step in range(size):
            uid = self.first + (start + step) % size
            if uid in in_use:
                continue
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            return TaskUser(f"iris-{uid}", uid, uid, own=True, lease=fd)
        raise IdentityError(f"every uid of IRIS_AGENT_UID_RANGE {self.first}-{self.last} is in use")


def work_path(root: Path | str, task_pk: int, attempt: int) -> Path:
    """An attempt's working directory: ``<root>/<task pk>-<attempt>``, removed when it ends."""
    return Path(root) / attempt_key(task_pk, attempt)


def attempt_key(task_pk: int, attempt: int) -> str:
    """The attempt's name among its agent's: its working directory's, and the end of its marker."""
    return f"{int(task_pk)}-{int(attempt)}"


def agent_tag(state_dir: Path | str) -> str:
    """An agent's name on its host, from its state directory (one per agent): two agents on one
    host, of one cluster or of two (a demo beside a test run), never share a marker."""
    return hashlib.sha256(os.fsencode(Path(state_dir).resolve())).hexdigest()[:12]


def attempt_marker(tag: str, task_pk: int, attempt: int) -> str:
    """The value of ``IRIS_ATTEMPT_KEY`` every process of an attempt carries (``<agent tag>:<task
    pk>-<attempt>``): what the agent ends an attempt by, so it names the agent as well."""
    return f"{tag}:{attempt_key(task_pk, attempt)}"


def log_path(root: Path | str, task_pk: int, attempt: int) -> Path:
    """Where an attempt's output goes: ``<root>/<task pk>/<attempt>.log``."""
    return Path(root) / str(int(task_pk)) / f"{int(attempt)}.log"


def private_dir(path: Path) -> Path:
    """``path`` and its missing parents, each made here mode 0700; ``path`` itself made 0700 even
    if it existed (an older agent made log directories 0755)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def closed_ancestor(path: Path) -> Path | None:
    """The first existing directory above ``path`` that other users may not traverse, if any:
    attempts of other uids then start in their working directories but cannot reach them by
    path (their ``HOME``, ``TMPDIR``)."""
    for folder in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
        try:
            mode = folder.stat().st_mode
        except FileNotFoundError:
            return None
        if not mode & 0o001:
            return folder
    return None


def task_environment(order_env: Mapping[str, str]) -> dict[str, str]:
    """What a task sees: ``PASSED_ENVIRONMENT`` of the agent's variables, then the order's."""
    env = {name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(order_env)
    return env


def end_attempt_processes(pgid: int | None, key: str, uid: int | None) -> int:
    """SIGKILL every process of an attempt: in its group, marked with its key, or running as its
    own uid. Returns how many there were."""
    return kill_until_gone(lambda: attempt_members(pgid=pgid, key=key, uid=uid))


def remove_files_of(uid: int) -> None:
    """Remove what a uid that was one attempt's left at the top of the shared temporary dirs."""
    for folder in SHARED_TMP_DIRS:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


@dataclass(frozen=True)
class Isolation:
    """How this agent runs attempts: who as, in a PID namespace or not, how memory is held."""

    identity: SharedIdentity | AccountIdentity | DynamicIdentity
    pid_namespace: bool = True
    memory_cgroup: str = ""


class AttemptProcess:
    """A started attempt. ``returncode`` follows ``subprocess``: negative means killed by that signal."""

    def __init__(
        self,
        popen: subprocess.Popen,
        log_file: Path,
        work_dir: Path,
        key: str,
        user: TaskUser | None,
        status_fd: int,
        memory_bytes: int,
    ):
        self.popen = popen
        self.log_file = log_file
        self.work_dir = work_dir
        self.key = key
        self.user = user
        self.status_fd = status_fd
        self.memory_bytes = memory_bytes
        self.kill_at: float | None = None
        self.exit_code: int | None = None
        self.out_of_memory = False

    @classmethod
    def spawn(
        cls,
        command: Sequence[str],
        env: Mapping[str, str],
        log_file: Path,
        *,
        key: str,
        work_dir: Path,
        user: TaskUser | None = None,
        memory_bytes: int = 0,
        isolation: Isolation | None = None,
    ) -> AttemptProcess:
        """Start ``command`` in ``work_dir`` (created 0700, owned by ``user``), as ``user`` when
        given; raises OSError if it cannot be started."""
        isolation = isolation or Isolation(SharedIdentity(None))
        env = dict(env)
        if shutil.which(command[0], path=env.get("PATH", os.defpath)) is None and os.sep not in command[0]:
            raise FileNotFoundError(errno.ENOENT, "command not found", command[0])
        private_dir(log_file.parent)
        work_dir.parent.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chmod(work_dir.parent, 0o711)  # its attempts reach their own directory, list none
        work_dir.mkdir(mode=0o700, exist_ok=True)
        env.update({"HOME": str(work_dir), "TMPDIR": str(work_dir), MARKER: key})
        status_r, status_w = os.pipe()
        leader = [
            sys.executable,
            "-I",
            str(SUPERVISOR),
            "--parent",
            str(os.getpid()),
            "--key",
            key,
            "--status-fd",
            str(status_w),
        ]
        if user is not None:
            os.chown(work_dir, user.uid, user.gid)
            leader += ["--uid", str(user.uid), "--gid", str(user.gid), "--groups", ",".join(map(str, user.groups))]
            if user.own:
                leader.append("--own-uid")
            env.update({"USER": user.name, "LOGNAME": user.name})
        if memory_bytes:
            leader += ["--memory", str(int(memory_bytes))]
            if isolation.memory_cgroup:
                leader += ["--memory-cgroup", isolation.memory_cgroup]
        if not isolation.pid_namespace:
            leader.append("--no-pid-namespace")
        log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(log, 0o600)
            popen = subprocess.Popen(
                [*leader, "--", *command],
                cwd=work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                start_new_session=True,
                close_fds=True,
                pass_fds=[status_w] + ([user.lease] if user is not None and user.lease is not None else []),
                preexec_fn=_die_with_parent(os.getpid()),
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(log)
            os.close(status_w)
        os.set_blocking(status_r, False)
        return cls(popen, log_file, work_dir, key, user, status_r, int(memory_bytes or 0))

    def remove_work_dir(self) -> None:
        """Delete the attempt's working directory (once it has ended), and what an identity of its
        own left in the shared temporary directories."""
        shutil.rmtree(self.work_dir, ignore_errors=True)
        if self.user is not None and self.user.own:
            remove_files_of(self.user.uid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code once the attempt has ended; sends SIGKILL when the grace period is over."""
        if self.exit_code is not None:
            return self.exit_code
        code = self.popen.poll()
        if code is None:
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.kill()
                self.kill_at = None
            return None
        self.exit_code = code
        try:
            outcome = json.loads(os.read(self.status_fd, 4096).decode() or "null")
        except (OSError, ValueError):
            outcome = None
        os.close(self.status_fd)
        if isinstance(outcome, dict):
            self.exit_code = int(outcome.get("exit", code))
            self.out_of_memory = bool(outcome.get("oom"))
        return self.exit_code

    def terminate(self, grace_seconds: float) -> None:
        """SIGTERM to the whole attempt now (the supervisor relays it), SIGKILL after
        ``grace_seconds`` (checked by ``poll``)."""
        if self.popen.poll() is not None or self.kill_at is not None:
            return
        try:
            os.kill(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.kill_at = time.monotonic() + max(grace_seconds, 0.0)

    def kill(self) -> None:
        """SIGKILL the supervisor's group (its namespace dies with it) and every process of the
        attempt that left the group."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        end_attempt_processes(
            self.popen.pid, self.key, self.user.uid if self.user is not None and self.user.own else None
        )

    def note(self, text: str) -> None:
        """Append an agent line to the attempt's log, so people see why it stopped."""
        try:
            with open(self.log_file, "a", encoding="utf-8") as log:
                log.write(f"[iris-agent] {text}\n")
        except OSError:
            pass


def _die_with_parent(parent_pid: int):
    libc = None
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:
            libc = None

    def preexec() -> None:
        if libc is not None:
            # SIGHUP to the supervisor, which ends the whole attempt (supervise.py).
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
            if os.getppid() != parent_pid:  # the agent died before prctl took effect
                os._exit(137)

    return preexec


def can_create_pid_namespace() -> bool:
    """Whether attempts of this agent can get a PID namespace (tried once, by the supervisor)."""
    probe = subprocess.run([sys.executable, "-I", str(SUPERVISOR), "--probe-pid-namespace"], capture_output=True)
    return probe.returncode == 0
