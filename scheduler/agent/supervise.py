"""An attempt's supervisor: the one process the agent starts per attempt (standard library only).

The agent runs ``python -I supervise.py --parent PID --key KEY [options] -- COMMAND...`` in a new
session (this process's pid is the attempt's process group), with its stdout on the attempt's
log file and its environment the task's. The task never holds the log file: its stdout and
stderr are a pipe this process copies into the log, so a task cannot open, rewind or truncate
any log, and a process of the attempt that outlives it writes nowhere.

**One process namespace per attempt** where one can be made (root; an ordinary user through an
unprivileged user namespace): the supervisor forks an *init*, pid 1 of a new PID namespace,
which forks the command and reaps whatever is orphaned there. When the command exits, init
exits, and the kernel kills every process left in the namespace (``setsid``, double forks and
``nohup`` included) before init is reaped. Init dies with the supervisor
(``PR_SET_PDEATHSIG``), and the supervisor with the agent, so a ``kill -9`` of either ends
the whole attempt. Where no namespace can be made (``--no-pid-namespace``, or the kernel
refuses), the supervisor is a subreaper (the attempt's orphans are reparented to it), and the
attempt's processes are found by their process group, by the marker ``IRIS_ATTEMPT_KEY=<key>``
in their environment and, under an identity of its own, by uid (:func:`attempt_members`), and
killed when the command exits.

**Stops.** SIGTERM to this process stops the attempt: relayed to every process of the namespace
(init signals them all), or without one to the process group and the marked processes. The
agent's SIGKILL after the grace period ends the supervisor, and with it init and the namespace.

**Identity and memory.** The command runs as ``--uid``/``--gid``/``--groups`` when given, with
umask 077, under an address-space limit (``RLIMIT_AS``) of ``--memory`` bytes unless a cgroup
(``--memory-cgroup``, delegated by the operator) holds the attempt. Either way the supervisor
watches the attempt's resident memory and kills the attempt past its limit
(:class:`MemoryWatch`); the outcome says out of memory. Under the address-space limit, an attempt
that fails after coming near the limit, or after one allocation bigger than the limit was refused
(``ALLOCATION_REFUSED`` in the end of its output), ran out of memory too.

**Outcome.** Before it exits, the supervisor writes one JSON line to ``--status-fd``:
``{"exit": N, "oom": bool}`` (``exit`` as ``subprocess`` reads it: negative for a signal). It
then exits with the command's status (a signal the command died of is raised again, SIGKILL
included), so the agent reads the same code even if the line is lost.

The process helpers (``proc_stat``, ``group_members``, ``attempt_members``, ``kill_until_gone``)
are shared with the agent, which ends what a previous life of it left running
(``scheduler/agent/state.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import select
import signal
import sys
import time
from pathlib import Path

# Passes over /proc while killing a set of processes: each pass SIGKILLs every member found; a
# member forked during a pass is caught by the next one.
KILL_PASSES = 200
# Seconds between two kill passes.
KILL_PASS_SECONDS = 0.01
# Signals whose disposition cannot be changed: they already act by default.
UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})
# Signals Python sets to ignored at start, which an exec'd command must get back at their default.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGTERM, signal.SIGINT)
# The environment variable that marks every process of an attempt (value: the attempt's key).
MARKER = "IRIS_ATTEMPT_KEY"
# Seconds between two looks at the attempt (its output, its end, its memory).
LOOP_SECONDS = 0.05
# Seconds between two samples of the attempt's memory.
MEMORY_SAMPLE_SECONDS = 0.05
# An attempt that fails after one of its processes came this close to its address-space limit
# (1/8 of it, at least 32 MiB: what a process allocates between two samples) was refused
# memory: it is reported out of memory.
NEAR_LIMIT_FRACTION = 1 / 8
NEAR_LIMIT_MIN_BYTES = 32 * 1024 * 1024
# One allocation bigger than the whole limit is refused at once, far from the limit: an attempt
# that fails under an address-space limit with one of these in the last bytes of its output ran
# out of memory too (Python, C's strerror(ENOMEM), C++, and what CUDA, JAX and glibc print).
ALLOCATION_REFUSED = re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")
OUTPUT_TAIL_BYTES = 4096
# Bytes copied from the task's pipe to the log per read.
COPY_BYTES = 64 * 1024

# Linux constants (linux/sched.h, linux/prctl.h).
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


# --- processes in /proc ----------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, pgid, session id, start time in clock ticks since boot)`` of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return fields[0], int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def live_pids(exclude: int | None = None) -> list[int]:
    """Every process of the host's /proc but ``exclude`` and this one, zombies left out."""
    pids = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (exclude, me):
            stat = proc_stat(int(entry))
            if stat is not None and stat[0] not in ("Z", "X"):
                pids.append(int(entry))
    return pids


def group_members(pgid: int, *, exclude: int | None = None) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    return [pid for pid in live_pids(exclude) if (proc_stat(pid) or ("", -1))[1] == pgid]


def process_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def carries_marker(pid: int, key: str) -> bool:
    """Whether the process was started with ``IRIS_ATTEMPT_KEY=key`` (readable for root and for
    the process's own uid)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            environ = file.read()
    except OSError:
        return False
    return f"{MARKER}={key}".encode() in environ.split(b"\0")


def pid_namespace(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def attempt_members(
    *,
    pgid: int | None = None,
    key: str | None = None,
    uid: int | None = None,
    namespace: int | None = None,
    exclude: int | None = None,
) -> list[int]:
    """Live processes of an attempt: in its process group, marked with its key, running as its
    own uid, or in its PID namespace (each criterion given counts)."""
    members = []
    for pid in live_pids(exclude):
        if pgid is not None and (proc_stat(pid) or ("", -1))[1] == pgid:
            members.append(pid)
        elif uid is not None and process_uid(pid) == uid:
            members.append(pid)
        elif namespace is not None and pid_namespace(pid) == namespace:
            members.append(pid)
        elif key is not None and carries_marker(pid, key):
            members.append(pid)
    return members


def descendants(pid: int) -> list[int] | None:
    """Every live descendant of ``pid``, read from ``/proc/<pid>/task/<tid>/children`` (cheap: it
    reads the attempt's processes, not the host's); None where the kernel does not list children.
    Inside a PID namespace every process is a descendant of its init (orphans are reparented to it)."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as file:
                    children = [int(child) for child in file.read().split()]
            except FileNotFoundError:
                if parent == pid:
                    return None
                continue
            except (OSError, ValueError):
                continue
            found += children
            queue += children
    return found


def kill_until_gone(find, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to every process ``find()`` lists until it lists none (SIGKILL) or once
    (another signal). Returns how many distinct processes were signalled."""
    signalled: set[int] = set()
    for _ in range(KILL_PASSES if sig == signal.SIGKILL else 1):
        members = find()
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, sig)
                signalled.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGKILL:
            time.sleep(KILL_PASS_SECONDS)
    return len(signalled)


# --- namespaces and memory -------------------------------------------------------------------


def enter_pid_namespace() -> bool:
    """Make this process's next child pid 1 of a new PID namespace. As root directly; as an
    ordinary user inside a new user namespace that maps only its own uid and gid. False if the
    kernel refuses (the attempt then runs without one)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWPID if uid == 0 else CLONE_NEWPID | CLONE_NEWUSER
    if libc().unshare(flags) != 0:
        return False
    if flags & CLONE_NEWUSER:
        try:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        except OSError:
            return False
    return True


def die_with_parent(to_parent: int) -> None:
    """SIGKILL this process when its parent dies; exit now if it already has. ``to_parent`` is
    the write end of a pipe only the parent reads (in a new PID namespace ``getppid()`` is 0,
    so the parent's death shows as the pipe's reader gone)."""
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    poll = select.poll()
    poll.register(to_parent, select.POLLERR)
    if poll.poll(0):
        os._exit(137)


def resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as file:
            return int(file.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def peak_address_space(pid: int) -> int:
    """``VmPeak``: the most address space the process has had, in bytes."""
    try:
        with open(f"/proc/{pid}/status", "rb") as file:
            for line in file:
                if line.startswith(b"VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


class MemoryCgroup:
    """A cgroup of its own for the attempt, under a directory the operator delegated to the
    agent (cgroup v2, or v1's memory controller): its limit, and whether the kernel killed in it."""

    def __init__(self, parent: Path, key: str, limit: int):
        self.path = Path(parent) / f"iris-{key}"
        self.v2 = (Path(parent) / "cgroup.controllers").exists() or (Path(parent) / "memory.max").exists()
        self.path.mkdir(exist_ok=True)
        if self.v2:
            (self.path / "memory.max").write_text(str(limit))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            swap = self.path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    swap.write_text(str(limit))
                except OSError:
                    pass

    def enter(self) -> None:
        """Move the calling process into the cgroup (its children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                field, _, value = line.partition(" ")
                if field == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # members still leaving
                time.sleep(0.01)


class MemoryWatch:
    """The attempt's memory as sampled: past ``limit`` resident bytes in all its processes
    together it must be killed; ``near_limit`` when a process's address space came close to it."""

    def __init__(self, limit: int):
        self.limit = limit
        self.margin = max(int(limit * NEAR_LIMIT_FRACTION), NEAR_LIMIT_MIN_BYTES)
        self.near_limit = False
        self.next_sample = 0.0

    def over(self, members) -> bool:
        """Sample (at most every ``MEMORY_SAMPLE_SECONDS``); True if the attempt is over its limit."""
        now = time.monotonic()
        if now < self.next_sample:
            return False
        self.next_sample = now + MEMORY_SAMPLE_SECONDS
        pids = members()
        if any(peak_address_space(pid) >= self.limit - self.margin for pid in pids):
            self.near_limit = True
        return sum(resident_bytes(pid) for pid in pids) > self.limit


# --- the attempt -----------------------------------------------------------------------------


def exec_command(command: list[str], out_w: int, args: argparse.Namespace) -> None:
    """In the command's process: its output on the pipe, its limits and identity, then exec."""
    try:
        for sig in RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        os.umask(0o077)
        if args.memory and not args.memory_cgroup:
            resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
        if args.uid is not None:
            os.setgroups([int(g) for g in args.groups.split(",") if g] if args.groups else [])
            os.setgid(args.gid)
            os.setuid(args.uid)
        os.execvp(command[0], command)
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the child must not return
        try:
            os.write(2, f"[iris-agent] could not start {command[0]!r}: {exc}\n".encode())
        finally:
            os._exit(127)


def run_init(
    command: list[str],
    out_w: int,
    status_w: int,
    namespaced: bool,
    args: argparse.Namespace,
    cgroup: MemoryCgroup | None,
) -> None:
    """The attempt's init: pid 1 of its namespace (or, without one, the command's parent). Forks
    the command, reaps every orphan, and hands the command's wait status to the supervisor."""
    die_with_parent(status_w)
    if cgroup is not None:
        cgroup.enter()
    if namespaced:
        # A stop relayed by the supervisor reaches every process of the namespace.
        signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(-1, signal.SIGTERM))
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the supervisor signals the group itself
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        exec_command(command, out_w, args)
    os.close(out_w)
    status = 0
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            status = raw
            break
    os.write(status_w, f"{status}\n".encode())
    os._exit(0)  # in a namespace: the kernel now kills every process left in it


class Supervisor:
    def __init__(self, args: argparse.Namespace, command: list[str]):
        self.args = args
        self.command = command
        self.me = os.getpid()
        self.init: int | None = None
        self.init_reaped = False
        self.namespace: int | None = None
        self.stopping = False
        self.memory = MemoryWatch(args.memory) if args.memory else None
        self.out_of_memory = False
        self.output_tail = b""  # the last OUTPUT_TAIL_BYTES of the task's output

    def members(self) -> list[int]:
        """The attempt's processes, this one excepted."""
        if self.namespace is not None:
            below = descendants(self.init) if self.init else None
            if below is not None:
                return [self.init, *below]
            return attempt_members(namespace=self.namespace, exclude=self.me)
        uid = self.args.uid if self.args.own_uid else None
        return attempt_members(pgid=self.me, key=self.args.key, uid=uid, exclude=self.me)

    def task_processes(self) -> list[int]:
        """The command's processes, init (which is ours) excepted: the descendants of init in a
        namespace, else of this process (a subreaper: orphans of the attempt are reparented
        here, and ``setsid`` changes no parent); cheap, as only the attempt is read."""
        below = descendants(self.init if self.namespace is not None else self.me) if self.init else None
        if below is None:
            below = self.members()
        return [pid for pid in below if pid != self.init]

    def reap(self) -> bool:
        """Reap what has exited (init, and without a namespace the attempt's orphans); True once
        init has."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return self.init_reaped
            if pid == self.init:
                self.init_reaped = True

    def stop(self, signum=None, frame=None) -> None:
        """SIGTERM from the agent: relay it to the whole attempt."""
        if self.stopping:
            return
        self.stopping = True
        if self.namespace is not None and self.init is not None:
            os.kill(self.init, signal.SIGTERM)
        else:
            kill_until_gone(self.members, signal.SIGTERM)

    def end_everything(self) -> None:
        if self.init is not None:
            try:
                os.kill(self.init, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.namespace is None:
            kill_until_gone(self.members)

    def agent_gone(self, signum, frame) -> None:
        if os.getppid() != self.args.parent:  # a real parent death, not a stray SIGHUP
            self.end_everything()
            os._exit(137)

    def run(self) -> int:
        args = self.args
        signal.signal(signal.SIGHUP, self.agent_gone)
        signal.signal(signal.SIGTERM, self.stop)
        if os.getppid() != args.parent:  # the agent died before the handler was in place
            return 137
        cgroup = (
            MemoryCgroup(Path(args.memory_cgroup), args.key, args.memory)
            if args.memory_cgroup and args.memory
            else None
        )
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        namespaced = args.pid_namespace and enter_pid_namespace()
        if not namespaced:
            libc().prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.init = os.fork()
        if self.init == 0:
            os.close(out_r)
            os.close(status_r)
            run_init(self.command, out_w, status_w, namespaced, args, cgroup)
        os.close(out_w)
        os.close(status_w)
        if namespaced:
            self.namespace = pid_namespace(self.init)
        os.set_blocking(out_r, False)
        ended = False
        while not ended:
            try:
                select.select([out_r], [], [], LOOP_SECONDS)
            except InterruptedError:
                pass
            self.copy(out_r)
            ended = self.reap()
            if not ended and self.memory is not None and cgroup is None and self.memory.over(self.task_processes):
                self.out_of_memory = True
                self.end_everything()
        self.copy(out_r)
        os.close(out_r)  # a process that outlived the attempt (no namespace) now writes nowhere
        raw = os.read(status_r, 64).decode().strip()
        if self.namespace is None:
            kill_until_gone(self.members)
            self.reap()
        status = int(raw) if raw else None
        if cgroup is not None:
            self.out_of_memory = self.out_of_memory or cgroup.oom_kills() > 0
            cgroup.remove()
        if status is None:  # init was killed before the command ended: by us, past the memory limit
            code = -signal.SIGKILL
        else:
            code = os.waitstatus_to_exitcode(status)
        failed = code != 0 and not (self.stopping and code == -signal.SIGTERM)
        if failed and self.memory is not None and not args.memory_cgroup:
            refused = self.memory.near_limit or ALLOCATION_REFUSED.search(self.output_tail) is not None
            self.out_of_memory = self.out_of_memory or refused
        self.report(code)
        return code

    def copy(self, out_r: int) -> None:
        while True:
            try:
                data = os.read(out_r, COPY_BYTES)
            except BlockingIOError:
                return
            if not data:
                return
            self.output_tail = (self.output_tail + data)[-OUTPUT_TAIL_BYTES:]
            try:
                os.write(1, data)
            except OSError:  # the log's disk is full: the task keeps running
                pass

    def report(self, code: int) -> None:
        if self.args.status_fd is None:
            return
        try:
            os.write(self.args.status_fd, (json.dumps({"exit": code, "oom": self.out_of_memory}) + "\n").encode())
        except OSError:
            pass


def exit_as(code: int) -> int:
    """Exit as the command did: die of its signal (no core file), or return its code."""
    if code >= 0:
        return code
    sig = -code
    if sig not in UNCATCHABLE:  # SIGKILL and SIGSTOP take no handler (signal.signal raises)
        signal.signal(sig, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    time.sleep(1)  # a signal whose default is to ignore falls through to the exit below
    return 128 + sig


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="supervise")
    parser.add_argument("--parent", type=int, required=True, help="the agent's pid")
    parser.add_argument("--key", required=True, help="the attempt's key, the value of IRIS_ATTEMPT_KEY")
    parser.add_argument("--uid", type=int, default=None)
    parser.add_argument("--gid", type=int, default=None)
    parser.add_argument("--groups", default="", help="supplementary gids, comma-separated")
    parser.add_argument(
        "--own-uid", action="store_true", help="the uid is this attempt's alone: its processes are ours"
    )
    parser.add_argument("--memory", type=int, default=0, help="the attempt's memory limit in bytes (0: none)")
    parser.add_argument("--memory-cgroup", default="", help="a delegated cgroup directory to hold the attempt")
    parser.add_argument("--no-pid-namespace", dest="pid_namespace", action="store_false")
    parser.add_argument("--status-fd", type=int, default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return args, command


def can_create_pid_namespace() -> bool:
    """Whether this process could give an attempt a PID namespace (tried in a throwaway child)."""
    child = os.fork()
    if child == 0:
        os._exit(0 if enter_pid_namespace() else 1)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0


def main(argv: list[str]) -> int:
    if argv == ["--probe-pid-namespace"]:
        return 0 if can_create_pid_namespace() else 1
    args, command = parse(argv)
    return exit_as(Supervisor(args, command).run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
