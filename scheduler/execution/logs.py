"""Task attempt logs on the server: who may read them, the tail of one, and the chunks worker
agents ship so a log survives the agent's host.

Two places hold logs. Agents on the server's own host write ``TASK_LOG_DIR/<task>/<n>.log``
directly; every agent also ships its logs in chunks (``POST /api/v1/agent/logs/``), stored under
``SHIPPED_LOG_DIR`` with the same layout. A reader gets the directly written file when there is
one (it is the most complete), else the shipped copy.

Shipped copies are the server user's alone: files 0600 in 0700 directories.

Each shipped log is bounded by ``TASK_LOG_MAX_BYTES``: the server keeps the first that many
bytes of an attempt's log, then one line saying the rest was cut, and answers ``truncated`` so
the agent stops shipping it. The full log stays on the agent's host while that host lives.

Shipped logs not written to for ``IRIS_SHIPPED_LOG_DAYS`` are deleted by the hourly
``scheduler.prune_history`` task (:func:`prune_shipped_logs`). An attempt still running whose log
was deleted loses nothing it ships later: its next chunk is answered with the size the server
has (none), and the agent ships the log again from its start.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from scheduler.foundation import roles
from scheduler.foundation.access import owns_job

TRUNCATED_LINE = (
    "\n[iris] log cut at {limit:,} bytes (IRIS_TASK_LOG_MAX_BYTES): the server keeps the first {limit:,} bytes "
    "of each attempt's log; the rest stays only on the worker's host\n"
)


@dataclass(frozen=True)
class LogTail:
    text: str
    size: int  # bytes in the whole stored log
    source: str  # "local" (written on this host) or "shipped" (sent by the worker's agent)


@dataclass(frozen=True)
class ShipOutcome:
    size: int  # bytes of the agent's log the server has (the agent's next offset)
    truncated: bool


def may_read_log(user, job) -> bool:
    """The job's owner (or an admin), and operators."""
    return owns_job(user, job) or roles.is_operator(user)


def log_file(root: Path | str, task_pk: int, attempt: int) -> Path:
    """``<root>/<task pk>/<attempt>.log``: the layout of scheduler.agent.process.log_path."""
    return Path(root) / str(int(task_pk)) / f"{int(attempt)}.log"


def read_tail(task_pk: int, attempt: int, tail: int) -> LogTail | None:
    """The last ``tail`` bytes of an attempt's log (text, invalid UTF-8 replaced), or None."""
    for source, root in (("local", settings.TASK_LOG_DIR), ("shipped", settings.SHIPPED_LOG_DIR)):
        path = log_file(root, task_pk, attempt)
        try:
            with open(path, "rb") as handle:
                handle.seek(0, 2)
                size = handle.tell()
                handle.seek(max(0, size - tail))
                body = handle.read()
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue  # none here, or an agent of another user wrote it (its shipped copy is ours)
        return LogTail(body.decode("utf-8", errors="replace"), size, source)
    return None


def private_dir(path: Path) -> None:
    """``path`` and the shipped-log directories above it, mode 0700: the server's copies are
    readable by the server's user alone (a task on an agent sharing the host cannot open them)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (path, path.parent):
        if folder.stat().st_mode & 0o077:
            os.chmod(folder, 0o700)


def store_chunk(task_pk: int, attempt: int, offset: int, data: bytes) -> ShipOutcome:
    """Append ``data``, which starts at byte ``offset`` of the agent's log, to the shipped copy.

    Idempotent: bytes the server already has (a retry after a lost answer) are skipped. A chunk
    that starts past the stored end is not written; the answer's ``size`` says where to resume.
    Beyond ``TASK_LOG_MAX_BYTES`` nothing more is kept (see the module docstring).
    """
    limit = settings.TASK_LOG_MAX_BYTES
    path = log_file(settings.SHIPPED_LOG_DIR, task_pk, attempt)
    private_dir(path.parent)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as handle:
        stored = handle.tell()
        end = offset + len(data)
        if stored > limit:  # already cut (the cut line lies past the limit)
            return ShipOutcome(size=end, truncated=True)
        if offset > stored:
            return ShipOutcome(size=stored, truncated=False)
        new = data[stored - offset :]
        room = limit - stored
        handle.write(new[:room])
        if len(new) > room:
            handle.write(TRUNCATED_LINE.format(limit=limit).encode())
            return ShipOutcome(size=end, truncated=True)
    return ShipOutcome(size=max(end, stored), truncated=False)


def prune_shipped_logs(now_s: float, keep_days: float, *, deadline: float | None = None) -> tuple[int, int]:
    """Delete the shipped logs last written more than ``keep_days`` before ``now_s`` (a Unix
    time; 0 days: keep all), and the task directories left empty. Returns (files, bytes).
    Stops, between two task directories, once ``time.monotonic()`` reaches ``deadline``."""
    root = Path(settings.SHIPPED_LOG_DIR)
    if keep_days <= 0 or not root.is_dir():
        return 0, 0
    cutoff = now_s - keep_days * 86400
    files = freed = 0
    with os.scandir(root) as tasks:
        for task_dir in tasks:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if not task_dir.is_dir(follow_symlinks=False):
                continue
            left = False
            with os.scandir(task_dir.path) as logs:
                for entry in logs:
                    stat = entry.stat(follow_symlinks=False)
                    if entry.is_file(follow_symlinks=False) and stat.st_mtime < cutoff:
                        os.unlink(entry.path)
                        files += 1
                        freed += stat.st_size
                    else:
                        left = True
            if not left:
                try:
                    os.rmdir(task_dir.path)
                except OSError:  # a chunk arrived meanwhile
                    pass
    return files, freed
