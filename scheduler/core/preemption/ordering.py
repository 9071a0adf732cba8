"""The one ordering of preemption victims, as sort keys. Lower keys are evicted first.

- **Solo victims on one worker** (:func:`group_order`): lowest stamped band first, then the
  cheapest (resource value of one task), then job id; within a group (one job, one band, one
  worker) the lowest task index first.
- **A worker's best eviction** for one candidate: a single victim, keyed as above with its
  index (:func:`single_victim_key`), ranks ahead of any set of several, which rank by (number
  of victims, total value, the worker's placement rank) (:func:`victim_set_key`). The search
  takes the lowest key over the workers the candidate may use.
- **Gang slices** (:func:`slice_order`): lowest band (the slice's highest-ranked member) first,
  then cheapest in total, then job id.
- **Hosts freed of squatters for a gang** (:func:`host_order`): fewest victims, then lowest
  total value, then the host's position in its group.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Protocol


class VictimGroup(Protocol):
    """What the ordering reads of a solo victim group (``candidates.VictimGroup``)."""

    neg_band: int
    value: int
    job_id: str
    members: Sequence


class Slice(Protocol):
    """What the ordering reads of a gang slice (``candidates.Slice``)."""

    max_band: int
    value: int
    job_id: str


task_index = attrgetter("index")
worker_of = attrgetter("worker")
worker_then_index = attrgetter("worker", "index")


def group_order(group: VictimGroup) -> tuple[int, int, str]:
    return (group.neg_band, group.value, group.job_id)


def single_victim_key(group: VictimGroup) -> tuple[int, int, int, str, int]:
    """One victim, the first member of ``group``; the leading 1 puts it ahead of every set."""
    return (1, group.neg_band, group.value, group.job_id, group.members[0].index)


def victim_set_key(picks: list[tuple[VictimGroup, int]], worker_rank: int) -> tuple[int, int, int]:
    """Several victims: ``picks`` are (group, how many of its first members)."""
    return (sum(k for _, k in picks), sum(g.value * k for g, k in picks), worker_rank)


def slice_order(piece: Slice) -> tuple[int, int, str]:
    return (-piece.max_band, piece.value, piece.job_id)


def host_order(recoverable: tuple) -> tuple:
    """``recoverable`` is (victims, total value, position in group, worker, picks)."""
    return recoverable[:3]
