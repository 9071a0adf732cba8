"""What the agent has running, on disk, so that its next life can end what this one left behind.

``<state dir>/attempts.json`` lists each live attempt's process group (the pid of its
supervisor, which is the group id, and the supervisor's start time, so a reused pid is never
mistaken for ours), its uid when that uid was the attempt's own, and the boot it was started
in. It is rewritten atomically whenever an attempt starts or ends. An agent that starts reads it
first and SIGKILLs every process of those attempts still alive: in their groups, carrying their
``IRIS_ATTEMPT_KEY``, or running as their own uids (processes that left their group: ``setsid``,
double forks, ``nohup``; where attempts have PID namespaces the kernel has already ended them).
It reports the attempts as worker-lost before it registers or accepts work: a task never runs
twice because its agent was restarted.

One agent at a time owns a state dir (:meth:`AttemptState.take`, an exclusive ``flock`` held for
the agent's life): a second agent started with the same worker name and state dir while the
first runs would take the first's live attempts for leftovers and kill them, so it refuses to
start instead, naming the dir and the agent that holds it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent.process import agent_tag, attempt_marker, end_attempt_processes
from scheduler.agent.supervise import group_members, proc_stat

log = logging.getLogger("iris.agent")

STATE_FILE = "attempts.json"
LOCK_FILE = "agent.lock"


class StateDirInUse(RuntimeError):
    """Another live agent holds this state dir."""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Leftover:
    """An attempt a previous life of the agent had running, and how many processes of it were
    still alive (and are now killed)."""

    task: int
    attempt: int
    killed: int


class AttemptState:
    """The state file of one agent (one worker name on one host)."""

    def __init__(self, state_dir: Path | str):
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        self.tag = agent_tag(self.dir)
        # key -> (pgid, supervisor start ticks, the attempt's own uid or None)
        self.groups: dict[tuple[int, int], tuple[int, int, int | None]] = {}
        self._lock_fd: int | None = None

    def take(self) -> None:
        """Own the state dir for this process's life (the lock goes with the process, however it
        ends), or raise :class:`StateDirInUse` naming the agent that owns it."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StateDirInUse(
                f"another agent (pid {holder}) runs with the state dir {self.dir}: stop it first, "
                "or give this agent another --name or --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode("ascii"))
        self._lock_fd = fd

    def marker(self, task: int, attempt: int) -> str:
        """The marker this agent's processes of the attempt carry (``process.attempt_marker``)."""
        return attempt_marker(self.tag, task, attempt)

    def add(self, key: tuple[int, int], pid: int, own_uid: int | None = None) -> None:
        stat = proc_stat(pid)
        self.groups[key] = (pid, stat[3] if stat else -1, own_uid)
        self.write()

    def remove(self, key: tuple[int, int]) -> None:
        if self.groups.pop(key, None) is not None:
            self.write()

    def write(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        body = {
            "boot": boot_id(),
            "groups": [
                {"task": task, "attempt": attempt, "pgid": pgid, "start": start, "uid": uid}
                for (task, attempt), (pgid, start, uid) in sorted(self.groups.items())
            ],
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(body, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.path)

    def end_leftovers(self) -> list[Leftover]:
        """SIGKILL what the previous agent left running (:func:`end_attempt_processes`); every attempt it listed is returned
        (with 0 killed when its processes had already ended). The file is then emptied."""
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.error("cannot read the agent state file %s (%s): leftover processes cannot be ended", self.path, exc)
            return []
        same_boot = body.get("boot") == boot_id()
        leftovers = []
        for entry in body.get("groups", []):
            try:
                task, attempt, pgid, start = (int(entry[k]) for k in ("task", "attempt", "pgid", "start"))
            except (KeyError, TypeError, ValueError):
                continue
            uid = entry.get("uid")
            killed = 0
            if same_boot:
                group = pgid if self._ours(pgid, start) else None
                killed = end_attempt_processes(group, self.marker(task, attempt), uid if isinstance(uid, int) else None)
            leftovers.append(Leftover(task, attempt, killed))
        self.groups.clear()
        self.write()
        return leftovers

    @staticmethod
    def _ours(pgid: int, start: int) -> bool:
        """Whether process group ``pgid`` is still the one recorded. A pid cannot be handed out
        again while a group of that number has members, so: if the leader is alive it must be
        the same process (same start time); if it is gone, any members left are ours."""
        leader = proc_stat(pgid)
        if leader is not None and leader[0] not in ("Z", "X"):
            return leader[3] == start
        return bool(group_members(pgid))
