"""Keep the agent's credential away from the tasks it runs.

- ``make_non_dumpable``: ``prctl(PR_SET_DUMPABLE, 0)`` on Linux. Processes of the same uid can
  no longer read the agent's ``/proc/<pid>/environ`` or ``/proc/<pid>/mem``, nor ptrace it; only
  a process with ``CAP_SYS_PTRACE`` (root) still can, which is why a root agent runs its tasks
  as another user (``scheduler/agent/process.py``).
- ``scrub_environment``: remove a variable from the agent's environment, overwriting its value
  in place first, so it is gone from ``/proc/<pid>/environ`` too (which shows the environment
  block the process was started with, not what ``unsetenv`` leaves), and from what children
  inherit.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger("iris.agent")

# prctl option: whether the process may be dumped, ptraced, or read through /proc by its uid.
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def make_non_dumpable() -> bool:
    """True if this process is now non-dumpable (Linux); False where that is not possible."""
    libc = _libc()
    if libc is None:
        return False
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_DUMPABLE, 0) failed: errno %s", ctypes.get_errno())
        return False
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def scrub_environment(name: str) -> None:
    """Remove ``name`` from this process's environment, its value overwritten with NULs where
    the C library's ``environ`` points (the start-up block ``/proc/<pid>/environ`` reads)."""
    libc = _libc()
    if libc is not None:
        prefix = name.encode() + b"="
        try:
            environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
            i = 0
            while environ[i]:
                address = environ[i]
                entry = ctypes.string_at(address)
                if entry.startswith(prefix):
                    ctypes.memset(address + len(prefix), 0, len(entry) - len(prefix))
                i += 1
        except (ValueError, OSError):
            pass
    os.environ.pop(name, None)
