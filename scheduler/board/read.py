"""The board's one reader: what the newest tick published, parsed once per tick per process.

Every page, the API and the CLI (through the API) read tick-derived figures here: the queue
with positions, reasons and counts (:func:`queue_index`) and the what-if basis
(:func:`whatif_basis`). Both come from the newest tick record that holds a publication or names
the record holding it (``TickRecord.explanation_tick``: a tick that reused the previous
decision publishes nothing new). One per-process cache keeps each part's parse with the
tick it was read for: a poll at the same tick costs one query, a new tick that reused the
decision costs one more (its own number, clock and samples), and only a new publication is
parsed again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

from django.db.models import Q

from scheduler.board.formats import WHATIF_BASIS_VERSION
from scheduler.board.queue import EMPTY_QUEUE, QueueIndex, parse_queue_index
from scheduler.board.whatif import WhatIfBasis, parse_basis
from scheduler.core.budget import spend_with
from scheduler.core.decision import collector_paused
from scheduler.models import TickRecord


@dataclass(frozen=True, slots=True)
class BoardTick:
    """The newest tick with a publication: its (pk, now_ms) (``tick``), and the (pk, now_ms)
    of the record holding the publication (``holder``): the tick itself, or the earlier one it
    names because it reused that tick's decision. Both pairs are cache keys: a pk alone may
    come back in a test database."""

    tick: tuple[int, int]
    holder: tuple[int, int]


def newest_board_tick() -> BoardTick | None:
    """The newest tick that published (or names the tick holding its publication). One query."""
    row = (
        TickRecord.objects.filter(Q(explanation__isnull=False) | Q(explanation_tick__isnull=False))
        .order_by("-pk")
        .values_list("pk", "now_ms", "explanation_tick", "explanation_tick__now_ms")
        .first()
    )
    if row is None:
        return None
    pk, now, holder, holder_now = row
    return BoardTick((pk, now), (holder, holder_now) if holder is not None else (pk, now))


def newest_explained_tick() -> int | None:
    """The pk of the newest tick with a publication. One query."""
    newest = newest_board_tick()
    return newest.tick[0] if newest is not None else None


# {part: (the tick it was read for, the parsed part)}. Read and replaced whole per part.
_cache: dict[str, tuple[BoardTick, object]] = {}

Part = TypeVar("Part")


def _read(
    part: str,
    newest: BoardTick,
    parse: Callable[[BoardTick], Part | None],
    retick: Callable[[Part, BoardTick], Part | None],
) -> Part | None:
    """The part as of ``newest``: the cached parse if it was read for this tick; the cached
    parse with this tick's own fields (``retick``) if it was read for an earlier tick with the
    same holder; else a fresh ``parse``. None: the publication went away between our reads."""
    hit = _cache.get(part)
    if hit is not None:
        seen, value = hit
        if seen.tick == newest.tick:
            return value  # type: ignore[return-value]
        if seen.holder == newest.holder:
            value = retick(value, newest)  # type: ignore[arg-type]
            if value is not None:
                _cache[part] = (newest, value)
            return value  # type: ignore[return-value]
    # The parsed JSON and the objects built from it are hundreds of thousands of objects beside
    # the process's live data, with no cycles among them: collections on the way would only
    # rescan what is live.
    with collector_paused():
        value = parse(newest)
    if value is not None:
        _cache[part] = (newest, value)
    return value


def forget() -> None:
    """Parse again at the next read (tests: SQLite reuses a rolled-back test's tick pk)."""
    _cache.clear()


def queue_index() -> QueueIndex:
    """The newest tick's queue, indexed. One query, plus one the first time a process sees a
    tick (and the parse, tens of milliseconds at 100,000 pending tasks, once per publication)."""
    newest = newest_board_tick()
    if newest is None:
        return EMPTY_QUEUE
    return _read("queue", newest, _parse_queue, _retick_queue) or EMPTY_QUEUE


def _parse_queue(newest: BoardTick) -> QueueIndex | None:
    pk, now_ms = newest.tick
    row = (
        TickRecord.objects.filter(pk=pk)
        .values_list("started_at", "spend", "limits", "explanation", "explanation_tick__explanation")
        .first()
    )
    if row is None:
        return None
    started_at, spend, limits, own, held = row
    explanation = own if own is not None else held
    if explanation is None:
        return None  # a newer tick cleared it between our two reads
    return parse_queue_index(pk, now_ms, started_at, spend, limits, explanation)


def _retick_queue(index: QueueIndex, newest: BoardTick) -> QueueIndex | None:
    pk, now_ms = newest.tick
    row = TickRecord.objects.filter(pk=pk).values_list("started_at", "spend", "limits").first()
    if row is None:
        return None
    return replace(
        index, tick_pk=pk, tick_at=row[0], spend=dict(row[1] or {}), limits=dict(row[2] or {}), tick_now_ms=now_ms
    )


def whatif_basis() -> WhatIfBasis | None:
    """The newest tick's what-if basis, or None before any tick published one (or when the
    newest publication was written by a release with another basis format). One query, plus
    one (and a parse of a few milliseconds per thousand workers) once per publication."""
    newest = newest_board_tick()
    if newest is None:
        return None
    return _read("whatif", newest, _parse_basis, _retick_basis)


def _parse_basis(newest: BoardTick) -> WhatIfBasis | None:
    pk = newest.tick[0]
    row = (
        TickRecord.objects.filter(pk=pk)
        .values_list("started_at", "spend", "whatif_basis", "explanation_tick__whatif_basis")
        .first()
    )
    if row is None:
        return None
    started_at, spend, own, held = row
    data = own if own is not None else held
    if data is None or data.get("version") != WHATIF_BASIS_VERSION:
        return None  # a newer tick cleared it between the two reads, or an older release stored it
    return parse_basis(pk, started_at, spend, data)


def _retick_basis(basis: WhatIfBasis, newest: BoardTick) -> WhatIfBasis | None:
    pk = newest.tick[0]
    row = TickRecord.objects.filter(pk=pk).values_list("started_at", "spend").first()
    if row is None:
        return None
    return replace(basis, tick=pk, tick_at=row[0], spend={str(u): int(v) for u, v in (row[1] or {}).items()})


@dataclass(frozen=True, slots=True)
class Spend:
    """Spend per user in points (users at zero left out) and what it is as of: a tick (``tick``,
    started ``at``), or summed live from the active tasks (both None)."""

    spend: dict[str, int]
    tick: int | None = None
    at: datetime | None = None


def published_spend() -> Spend | None:
    """The newest tick's spend with its own changes applied (``spend`` + ``spend_change``), or
    None before the first tick. One query of two small JSON columns: pages read this instead of
    summing every active task per request."""
    row = TickRecord.objects.order_by("-pk").values_list("pk", "started_at", "spend", "spend_change").first()
    if row is None:
        return None
    pk, started_at, spend, change = row
    return Spend(spend_with(spend or {}, change or {}), pk, started_at)
