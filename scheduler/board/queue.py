"""The queue as the newest tick published it: positions, bands and reasons from the stored
explanation (:mod:`scheduler.board.formats`), indexed for the queue page, the API and the CLI.
Read through :func:`scheduler.board.read.queue_index`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter, methodcaller

from django.db.models import Q

from scheduler.board.counts import UserCounts
from scheduler.board.estimates import ShownEstimate, shown_estimates
from scheduler.board.formats import EXPLANATION_VERSION
from scheduler.core.bands import Band
from scheduler.core.explain import cause_text, pending_text
from scheduler.models import Task
from scheduler.store.job_rows import JOB_SHAPE_FIELDS


@dataclass(frozen=True)
class QueueEntry:
    """One task as the newest tick (``tick``) left it: effective band, place, reason record.

    ``position`` (1-based) and ``band_count`` are the one definition
    (``core.explain.pending_queue``); ``reason`` is the stored record (code and parameters).
    """

    task: str
    job: str
    index: int
    user: str
    band: Band
    position: int
    reason: dict
    band_count: int = 0
    requested: Band | None = None
    tick: int | None = None

    @property
    def code(self) -> str:
        return self.reason.get("code", "unknown")

    @property
    def text(self) -> str:
        """The whole reason, with the place "as of tick N" (``core.explain.pending_text``)."""
        return pending_text(self.reason, self.band, self.position, self.band_count, self.tick)

    @property
    def cause(self) -> str:
        """The cause alone, for places that show the place and the downgrade beside it."""
        return cause_text(self.reason)

    def as_data(self) -> dict:
        """``{code, text, ...parameters, band, position, band_pending, tick}``: the API's
        ``pending_reason``."""
        return {
            **self.reason,
            "code": self.code,
            "text": self.text,
            "band": self.band.wire,
            "position": self.position,
            "band_pending": self.band_count,
            "tick": self.tick,
        }


def split_task_id(task_id: str) -> tuple[str, int]:
    job, _, index = task_id.rpartition("/")
    return job, int(index)


@dataclass(frozen=True)
class QueueIndex:
    """The newest tick's queue, indexed once per tick so pages of it cost nothing to cut.

    ``ids[rank]`` lists that band's pending task ids in scheduling order (position = index + 1),
    ``reason_of[rank]`` the matching indices into ``reasons`` and ``owner[rank]`` the users.
    ``users[rank]`` is the band's round-robin order (each user's first appearance: lower spend
    first). ``spend`` and ``limits`` are the tick's own samples, so a downgrade badge shows the
    numbers the tick decided with.
    """

    tick_pk: int | None
    tick_at: datetime | None
    spend: dict[str, int]
    limits: dict[str, int]
    reasons: list[dict]
    ids: dict[int, list[str]]
    reason_of: dict[int, list[int]]
    owner: dict[int, list[str]]
    users: dict[int, list[str]]
    requested: dict[int, list[int]] = field(default_factory=dict)
    # The instant the tick decided at (its ``now_ms``: what ages in its order are counted to).
    tick_now_ms: int | None = None
    # The tick's counts of active tasks (scheduler.board.counts): {(stamped band rank, user):
    # n} and {state: n}, as of this tick, so the page shows them beside the queue they match.
    running: dict[tuple[int, str], int] = field(default_factory=dict)
    active_by_state: dict[str, int] = field(default_factory=dict)
    # {user: UserCounts}: each user's pending and active tasks and jobs with either, as of this
    # tick (the budgets pages' columns).
    by_user: dict[str, UserCounts] = field(default_factory=dict)

    # {task id: (rank, offset in band)}, built on the first ``locate`` (see there).
    _where: dict[str, tuple[int, int]] | None = field(default=None, compare=False, repr=False)

    def count(self, rank: int) -> int:
        return len(self.ids.get(rank, ()))

    def band_counts(self) -> dict[int, int]:
        """``{rank: pending tasks}`` of the bands that have any, highest band first."""
        return {rank: len(self.ids[rank]) for rank in sorted(self.ids) if self.ids[rank]}

    def entry(self, rank: int, offset: int) -> QueueEntry:
        """The queue entry at ``offset`` (0-based) of band ``rank``; its position is ``offset + 1``."""
        task_id = self.ids[rank][offset]
        job_id, task_index = split_task_id(task_id)
        reason_index = self.reason_of[rank][offset]
        reason = self.reasons[reason_index] if 0 <= reason_index < len(self.reasons) else {"code": "unknown"}
        requested = self.requested.get(rank)
        return QueueEntry(
            task_id,
            job_id,
            task_index,
            self.owner[rank][offset],
            Band(rank),
            offset + 1,
            reason,
            band_count=len(self.ids[rank]),
            requested=Band(requested[offset]) if requested else None,
            tick=self.tick_pk,
        )

    def locate(self, task_id: str) -> QueueEntry | None:
        """The entry of a queued task, or None if the tick did not queue it.

        The first call maps every queued task id (tens of milliseconds for 100,000 tasks), once
        per index, that is once per tick per process; later calls are dictionary lookups. The map
        is built aside and published whole, so a concurrent reader never sees half of it.
        """
        where = self._where
        if where is None:
            where = {task: (rank, i) for rank, ids in self.ids.items() for i, task in enumerate(ids)}
            object.__setattr__(self, "_where", where)
        found = where.get(task_id)
        return None if found is None else self.entry(*found)

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.ids.values())

    def pending_by_user(self) -> dict[tuple[int, str], int]:
        """``{(effective band rank, user): pending tasks}``: one pass over the index."""
        counts: dict[tuple[int, str], int] = {}
        for rank, owners in self.owner.items():
            for user in owners:
                key = (rank, user)
                counts[key] = counts.get(key, 0) + 1
        return counts


EMPTY_QUEUE = QueueIndex(None, None, {}, {}, [], {}, {}, {}, {})


_split_user = methodcaller("split", "/", 2)
_user_part = itemgetter(1)


def parse_queue_index(
    pk: int, now_ms: int, started_at: datetime, spend: dict | None, limits: dict | None, explanation: dict
) -> QueueIndex:
    """The stored explanation (:func:`scheduler.board.formats.explanation_to_json`) of tick
    ``pk`` (decided at ``now_ms``), indexed."""
    if explanation.get("version") != EXPLANATION_VERSION:
        # Stored by an older release (a record per task, or reasons as text): the next tick
        # stores it again.
        explanation = {}
    ids: dict[int, list[str]] = {}
    reason_of: dict[int, list[int]] = {}
    owner: dict[int, list[str]] = {}
    requested: dict[int, list[int]] = {}
    # Each band's columns as stored (position = index + 1); the owners split from the ids at C
    # speed ("/alice/train/0" -> "alice").
    for stored_rank, band in explanation.get("bands", {}).items():
        rank = int(stored_rank)
        ids[rank] = band["ids"]
        reason_of[rank] = band["reasons"]
        requested[rank] = band["requested"]
        owner[rank] = list(map(_user_part, map(_split_user, band["ids"])))
    # Each user's first appearance in a band is their turn in its round robin.
    users = {rank: list(dict.fromkeys(owners)) for rank, owners in owner.items()}
    index = QueueIndex(
        tick_pk=pk,
        tick_at=started_at,
        spend=dict(spend or {}),
        limits=dict(limits or {}),
        reasons=list(explanation.get("reasons", [])),
        ids=ids,
        reason_of=reason_of,
        owner=owner,
        users=users,
        requested=requested,
        tick_now_ms=now_ms,
        running={
            (int(rank), user): n
            for rank, users in explanation.get("active", {}).get("by_band_user", {}).items()
            for user, n in users.items()
        },
        active_by_state=dict(explanation.get("active", {}).get("by_state", {})),
        by_user={
            user: UserCounts(*counts) for user, counts in explanation.get("active", {}).get("by_user", {}).items()
        },
    )
    return index


def job_matches(task_id: str, job: str, *, exact: bool = False) -> bool:
    """A job filter: ``/alice/train`` is that job and its children; other text is a substring.

    ``exact`` (the API's filter, given a normalised job id) matches that job only.
    """
    job_id = task_id.rpartition("/")[0]
    if exact:
        return job_id == job
    if job.startswith("/"):
        job = job.rstrip("/")
        return job_id == job or job_id.startswith(job + "/")
    return job in job_id


class QueueSelection:
    """The queue entries matching a filter, in scheduling order (by band, then position).

    A sequence for paginators: ``len`` and slices. Unfiltered, it holds ranges and cutting a
    window is O(window); a filter scans each band it covers once (strings only). No query.
    """

    def __init__(
        self,
        index: QueueIndex,
        ranks: list[int],
        *,
        user: str | None = None,
        job: str | None = None,
        exact_job: bool = False,
    ) -> None:
        self.index = index
        self.parts: list[tuple[int, range | list[int]]] = []
        for rank in ranks:
            ids = index.ids.get(rank, [])
            owners = index.owner.get(rank, [])
            if user or job:
                matches: range | list[int] = [
                    i
                    for i in range(len(ids))
                    if (not user or owners[i] == user) and (not job or job_matches(ids[i], job, exact=exact_job))
                ]
            else:
                matches = range(len(ids))
            if matches:
                self.parts.append((rank, matches))
        self.total = sum(len(matches) for _, matches in self.parts)

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, item: slice | int):
        if isinstance(item, int):
            found = self[item : item + 1] if item >= 0 else self[self.total + item : self.total + item + 1]
            if not found:
                raise IndexError(item)
            return found[0]
        start, stop, step = item.indices(self.total)
        if step != 1:
            raise ValueError("queue selections are cut in steps of one")
        entries: list[QueueEntry] = []
        for rank, matches in self.parts:
            if start >= stop:
                break
            if start >= len(matches):
                start, stop = start - len(matches), stop - len(matches)
                continue
            entries.extend(self.index.entry(rank, i) for i in matches[start:stop])
            start, stop = 0, stop - len(matches)
        return entries


def queue_selection(
    index: QueueIndex,
    *,
    band: Band | int | None = None,
    user: str | None = None,
    job: str | None = None,
    exact_job: bool = False,
) -> QueueSelection:
    """The entries of one band (or of all, highest first) matching ``user`` and ``job``. No query."""
    ranks = sorted(index.ids) if band is None else [int(band)]
    return QueueSelection(index, ranks, user=user, job=job, exact_job=exact_job)


def queue_window(
    index: QueueIndex, rank: int, *, user: str | None = None, job: str | None = None, offset: int = 0, limit: int = 50
) -> tuple[list[QueueEntry], int]:
    """One window of a band's queue, filtered, and how many tasks match. No query."""
    selection = queue_selection(index, band=rank, user=user, job=job)
    return selection[offset : offset + limit], len(selection)


def queue_rows(entries: list[QueueEntry]) -> dict[str, Task]:
    """The current rows of the tasks on a queue page, with their jobs (with what their shape's
    feasibility reads: ``store.job_rows.JOB_SHAPE_FIELDS``). One query (none if empty)."""
    if not entries:
        return {}
    by_job: dict[str, list[int]] = {}
    for entry in entries:
        by_job.setdefault(entry.job, []).append(entry.index)
    match = Q()
    for job_id, indices in by_job.items():
        match |= Q(job__name=job_id, index__in=indices)
    return {
        f"{t.job.name}/{t.index}": t
        for t in Task.objects.filter(match)
        .select_related("job")
        .only(
            "index",
            "state",
            "updated_at",
            "attempt_count",
            "preemption_count",
            "job__state",
            *(f"job__{field}" for field in JOB_SHAPE_FIELDS),
        )
    }


def queue_estimates(entries: list[QueueEntry], now_ms: int) -> dict[str, ShownEstimate]:
    """How the start estimates of the tasks on a queue page read at ``now_ms`` (task id ->
    estimate). One query (none if empty; see ``board.estimates.shown_estimates``)."""
    return shown_estimates((e.task for e in entries), now_ms)


@dataclass(frozen=True)
class RoundRobinPlace:
    """Where a queued task stands in its band's round robin across users."""

    band: Band
    position: int
    band_size: int
    user: str
    turn: int  # the user's turn in each round (1 = first)
    users: list[tuple[str, int]]  # the band's users in round-robin order, with their spend
    ahead_own: int  # the same user's tasks ahead of this one in the band


def round_robin_place(index: QueueIndex, rank: int, position: int) -> RoundRobinPlace | None:
    """The round-robin facts of the task at ``position`` (1-based) of band ``rank``. No query."""
    owners = index.owner.get(rank, [])
    if not 1 <= position <= len(owners):
        return None
    user = owners[position - 1]
    band_users = index.users.get(rank, [])
    ahead_own = sum(1 for u in owners[: position - 1] if u == user)
    return RoundRobinPlace(
        band=Band(rank),
        position=position,
        band_size=len(owners),
        user=user,
        turn=band_users.index(user) + 1 if user in band_users else 0,
        users=[(u, int(index.spend.get(u, 0))) for u in band_users],
        ahead_own=ahead_own,
    )
