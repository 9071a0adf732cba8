"""An attempt's session leader: the one process the agent starts per attempt (standard library only).

The agent runs ``python -I supervise.py --parent PID [--uid U --gid G] -- COMMAND...`` in a new
session, so this process's pid is the attempt's process group and session id. It forks the
task's command in that same group (as the task user when given ``--uid``), waits for it, and:

- **dies with the agent, and takes the group along.** The agent asks the kernel to send this
  process ``SIGHUP`` when the agent dies (``PR_SET_PDEATHSIG``, set before exec); the handler
  SIGKILLs the whole process group, so a task's children (``sh -c 'sleep 300 & sleep 300'``)
  end with the agent even after a ``kill -9`` of it.
- **leaves nothing behind.** When the command exits, what it left running in the group (a
  background child) is killed before this process exits with the command's status (a command
  killed by a signal makes this process die of the same signal, so ``returncode`` reads the same).
- **ignores the agent's SIGTERM itself**: a stop signals the whole group, so the command gets it
  directly and this process keeps waiting to report its status.

A task that leaves its process group (``setsid``) escapes both; only a cgroup would hold it (see
docs/operations.md, "Worker agents").

``group_members`` and ``kill_group`` are shared with the agent, which ends what a previous life
of it left running (``scheduler/agent/state.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

# Passes over /proc while killing a group: each pass SIGKILLs every member found; a member
# forked during a pass is caught by the next one.
KILL_PASSES = 200
# Seconds between two kill passes.
KILL_PASS_SECONDS = 0.01
# Signals whose disposition cannot be changed: they already act by default.
UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})


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


def group_members(pgid: int, *, exclude: int | None = None) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def kill_group(pgid: int, *, exclude: int | None = None) -> int:
    """SIGKILL every member of process group ``pgid`` (except ``exclude``) until none is left.
    Returns how many distinct processes were signalled."""
    killed: set[int] = set()
    for _ in range(KILL_PASSES):
        members = group_members(pgid, exclude=exclude)
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(KILL_PASS_SECONDS)
    return len(killed)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="supervise")
    parser.add_argument("--parent", type=int, required=True, help="the agent's pid")
    parser.add_argument("--uid", type=int, default=None)
    parser.add_argument("--gid", type=int, default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    me = os.getpid()

    def agent_gone(signum, frame):
        if os.getppid() != args.parent:  # a real parent death, not a stray SIGHUP from the task
            os.killpg(me, signal.SIGKILL)

    signal.signal(signal.SIGHUP, agent_gone)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the command got it too
    if os.getppid() != args.parent:  # the agent died before the handler was in place
        return 137

    child = os.fork()
    if child == 0:
        try:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if args.uid is not None:
                os.setgroups([])
                os.setgid(args.gid)
                os.setuid(args.uid)
            os.execvp(command[0], command)
        except BaseException as exc:  # noqa: BLE001 - whatever it was, the child must not return
            try:
                sys.stderr.write(f"[iris-agent] could not start {command[0]!r}: {exc}\n")
                sys.stderr.flush()
            finally:
                os._exit(127)

    _, status = os.waitpid(child, 0)
    kill_group(me, exclude=me)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in UNCATCHABLE:  # SIGKILL and SIGSTOP take no handler (signal.signal raises)
            signal.signal(sig, signal.SIG_DFL)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of this process
        except (ImportError, ValueError, OSError):
            pass
        os.kill(me, sig)
        time.sleep(1)  # a signal whose default is to ignore falls through to the exit below
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
