"""``simulate``: a snapshot document in, the decision document out, bytes to bytes.

The whole of ``manage.py simulate`` but reading the input: parse the JSON, validate it into a
:class:`ClusterSnapshot` (``wire.snapshot_from_json``), ``decide``, and render the decision
(``wire.decision_to_json``) as JSON. Errors are :class:`SimulateError` with the message the
command prints, naming the input (``var/snap.json: not valid JSON: ...``,
``var/snap.json: jobs[3].id: ...``).
"""

from __future__ import annotations

import orjson

from scheduler.core.decision import collector_paused, decide
from scheduler.core.types import ClusterSnapshot
from scheduler.core.wire import SnapshotError, decision_to_json, snapshot_from_json

# The indents the command offers: 2 (the default, one field a line) or 0 (one line).
INDENTS = (0, 2)


class SimulateError(ValueError):
    """The input is not a valid snapshot; the message names the input and what is wrong."""


def simulate(data: bytes, source: str, indent: int = 2, kept: list | None = None) -> bytes:
    """The decision on the snapshot ``data`` (read from ``source``, named in errors) as JSON,
    ending in a newline as the command prints it.

    ``kept``, when given, receives the snapshot, the decision and its document instead of their
    being freed on return: a process that ends right after (``manage.py simulate``, which exits
    with ``os._exit``) then never takes apart their hundreds of thousands of objects one by one."""
    # The snapshot's objects are all live until the decision is written: collections on the
    # way would only rescan them (see collector_paused).
    with collector_paused():
        snapshot = _read(data, source)
        # The text is not needed again: decide reuses its memory (with the parsed document's).
        del data
        decision = decide(snapshot)
        # snapshot_from_json lists the tasks job by job: the render need not check that.
        document = decision_to_json(decision, snapshot, tasks_by_job=True)
        if kept is not None:
            kept.extend((snapshot, decision, document))
        return orjson.dumps(document, option=(orjson.OPT_INDENT_2 if indent else 0) | orjson.OPT_APPEND_NEWLINE)


def _read(data: bytes, source: str) -> ClusterSnapshot:
    """The snapshot in ``data``. The parsed document is dropped on return, before ``decide``,
    which then reuses its memory instead of faulting in as much again."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SimulateError(f"{source}: not valid JSON: {exc}") from None
    try:
        return snapshot_from_json(raw)
    except SnapshotError as exc:
        raise SimulateError(f"{source}: {exc}") from None
