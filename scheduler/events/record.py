"""Recording events: one bulk insert into the staging table, inside the caller's transaction.

Every writer that changes what an event describes calls :func:`record` in the same
transaction, after its change, so an event commits exactly when its change does (a rollback, or
a tick killed mid-transaction, takes both). The rows go to :class:`~scheduler.models.StagedEvent`
in one statement whatever their number (``COPY`` on PostgreSQL, :func:`scheduler.store.bulk.insert_rows`);
:mod:`scheduler.events.sequence` gives them their place in the stream after commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from scheduler.models import Job, StagedEvent
from scheduler.store import bulk


class Draft(NamedTuple):
    """One event as a writer describes it; ``created_at`` is the writer's clock. (A named
    tuple: a burst tick builds tens of thousands, at a third of a frozen dataclass's cost.)"""

    kind: str
    created_at: datetime
    user: str = ""
    job: str = ""
    task_index: int | None = None
    attempt: int | None = None
    tick: int | None = None
    data: Mapping[str, Any] = MappingProxyType({})


COLUMNS = [
    ("kind", "text"),
    ("created_at", "timestamptz"),
    ('"user"', "text"),
    ("job", "text"),
    ("task_index", "integer"),
    ("attempt", "integer"),
    ("tick", "bigint"),
    ("data", "text"),
]


def record(drafts: Iterable[Draft]) -> int:
    """Stage ``drafts`` in order, in one statement; inside the caller's transaction. Returns how
    many."""
    return record_rows([staged_row(d) for d in drafts])


def record_rows(rows: list[tuple]) -> int:
    """Stage rows already in :data:`COLUMNS`' order and form (``staged_row``'s), in one
    statement: a writer with tens of thousands of one kind builds them without a ``Draft`` each
    (the tick's ``started`` events). Returns how many."""
    bulk.insert_rows(StagedEvent._meta.db_table, COLUMNS, rows)
    return len(rows)


def staged_fields(draft: Draft) -> dict[str, Any]:
    """One draft as the :class:`~scheduler.models.StagedEvent` row's values by attribute name,
    for a writer that stages it inside a statement of its own (a submission's one write)."""
    return dict(zip(STAGED_ATTRIBUTES, staged_row(draft), strict=True))


STAGED_ATTRIBUTES = ("kind", "created_at", "user", "job", "task_index", "attempt", "tick", "data")


def staged_row(d: Draft) -> tuple:
    """One draft as a staged row (:data:`COLUMNS`), its data as JSON text."""
    return (d.kind, d.created_at, d.user, d.job, d.task_index, d.attempt, d.tick, orjson.dumps(_plain(d.data)).decode())


def _plain(data: Mapping[str, Any]) -> dict:
    return data if type(data) is dict else dict(data)


def submitted(plan, now: datetime) -> Draft:
    """A job's first event, from the ``scheduler.jobs.submit.SubmissionPlan`` it is written by."""
    parent = plan.parent.name if plan.parent is not None else None
    data = {"band": plan.band.wire, "replicas": plan.request.replicas, "parent": parent}
    return Draft("submitted", now, plan.user, plan.job_id, data=data)


def record_cancelled(by: str, roots: list[tuple[int, str]], job_pks, now: datetime) -> int:
    """One ``cancelled`` event per job a cancel killed (``job_pks``: the roots ``(pk, name)`` and
    their unfinished descendants), each naming the root it was killed with; one query for the
    jobs' owners. Their tasks' ends are implied (no ``task_finished`` per task)."""
    root_names = sorted((name for _, name in roots), key=len, reverse=True)
    drafts = []
    for name, user in Job.objects.filter(pk__in=list(job_pks)).order_by("pk").values_list("name", "user"):
        root = next((r for r in root_names if name == r or name.startswith(r + "/")), name)
        drafts.append(Draft("cancelled", now, user, name, data={"by": by, "root": root}))
    return record(drafts)
