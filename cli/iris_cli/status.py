"""``iris scheduler status``: the scheduler's state at a glance, like Slurm's ``sdiag``.

One request (``GET scheduler/status``, operators only); ``--json`` prints the answer as is.
"""

from __future__ import annotations

import argparse
from typing import Any

from iris_cli import formatting as fmt
from iris_cli.client import Session

TICK_COLUMNS: list[fmt.Column] = [
    ("TICK", lambda t: t.get("id")),
    ("STARTED", lambda t: fmt.when(t.get("started_at"))),
    ("TOOK", lambda t: f"{t['duration_ms']:.0f} ms" if isinstance(t.get("duration_ms"), int | float) else None),
    ("DECIDE", lambda t: f"{t['decide_ms']:.0f} ms" if isinstance(t.get("decide_ms"), int | float) else None),
    ("PENDING", lambda t: t.get("pending")),
    ("ASSIGNED", lambda t: t.get("assigned")),
    ("PREEMPTED", lambda t: t.get("preempted")),
    ("EXPIRED", lambda t: t.get("expired")),
]
LEASE_COLUMNS: list[fmt.Column] = [
    ("LEASE", lambda lease: lease.get("name")),
    ("HOLDER", lambda lease: lease.get("holder") or "free"),
    (
        "RENEWED",
        lambda lease: (
            f"{lease['renewed_seconds_ago']:.1f} s ago" if lease.get("renewed_seconds_ago") is not None else None
        ),
    ),
]
CHECK_COLUMNS: list[fmt.Column] = [
    ("CHECK", lambda c: c.get("name")),
    ("STATUS", lambda c: c.get("status")),
    ("MS", lambda c: f"{c['ms']:.1f}" if isinstance(c.get("ms"), int | float) else None),
    ("DETAIL", lambda c: c.get("detail")),
]


def render(data: dict[str, Any]) -> str:
    age = data.get("last_tick_age_seconds")
    ready = data.get("readiness") or {}
    outbox = data.get("outbox") or {}
    workers = data.get("workers") or []
    summary = fmt.fields(
        [
            ("last tick", f"{age:.1f} s ago (every {data.get('tick_seconds')} s)" if age is not None else "never"),
            ("ready", "yes" if ready.get("status") == "ok" else f"NO: {', '.join(ready.get('failed') or [])}"),
            ("pending", "  ".join(f"{band} {n}" for band, n in (data.get("pending") or {}).items())),
            ("outbox", "  ".join(f"{state} {n}" for state, n in outbox.items())),
            ("workers", "  ".join(f"{w['backend']}/{w['health']} {w['count']}" for w in workers) or "none registered"),
        ]
    )
    return "\n\n".join(
        [
            summary,
            fmt.table(data.get("ticks") or [], TICK_COLUMNS, empty="No ticks recorded yet."),
            fmt.table(data.get("leases") or [], LEASE_COLUMNS, empty="No leases taken yet."),
            fmt.table(ready.get("checks") or [], CHECK_COLUMNS),
        ]
    )


def cmd_scheduler_status(session: Session, args: argparse.Namespace):
    return session.get("scheduler/status"), render


def add_commands(group, command) -> None:
    """Register ``scheduler status`` in ``group`` with the parser's ``command`` helper."""
    command(
        group, "status", cmd_scheduler_status, "ticks, leases, outbox, workers, pending per band, readiness (operators)"
    )
