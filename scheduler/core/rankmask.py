"""Sets of healthy workers as *rank masks*, for the placement pass's candidate lists.

A rank is a healthy worker's position in id order (``WorkerPool.by_id``). A rank mask is an int
with one byte per rank, 1 where the worker is in the set, 0 elsewhere. Intersecting, joining
and complementing sets are then single operations on ints, and ``itertools.compress`` reads a
set's workers off the mask's bytes already in id order: no set is hashed, sorted or mapped
element by element in Python. (As frozensets of ranks, intersected, sorted and mapped back to
workers, the candidate lists were 12% of a decision on the squatters mix.)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import compress


def everyone(ranks: int) -> int:
    """The mask of every one of ``ranks`` workers."""
    return int.from_bytes(b"\x01" * ranks, "little")


def mask_of(members: Iterable[int], ranks: int) -> int:
    """The mask of the ranks ``members``, out of ``ranks``."""
    mask = bytearray(ranks)
    for r in members:
        mask[r] = 1
    return int.from_bytes(mask, "little")


def masks_by_value(values: Sequence[Hashable | None]) -> dict[Hashable, int]:
    """Each value of ``values`` (one per rank; None: none) -> the mask of the ranks holding it."""
    masks: dict[Hashable, bytearray] = {}
    for r, value in enumerate(values):
        if value is not None:
            mask = masks.get(value)
            if mask is None:
                mask = masks[value] = bytearray(len(values))
            mask[r] = 1
    return {value: int.from_bytes(mask, "little") for value, mask in masks.items()}


def by_score(matching: int, allowed: Iterable[int]) -> list[int]:
    """``matching`` split by how many of the ``allowed`` masks (soft constraints) hold each
    rank: the mask of the ranks with k of them at index k."""
    levels = [matching]
    for mask in allowed:
        levels = [level & ~mask | fewer & mask for level, fewer in zip([*levels, 0], [0, *levels])]
    return levels


def workers_in(mask: int, by_id: Sequence[int]) -> Iterable[int]:
    """The workers of ``mask`` in id order (``by_id``: the workers by rank). Only the span of
    ranks from its first to its last worker is read: workers of one kind often have
    neighbouring ids (``cpu-*``, ``tpu-*``), so a mask of accelerator hosts covers a part."""
    if not mask:
        return ()
    first = ((mask & -mask).bit_length() - 1) // 8
    last = (mask.bit_length() - 1) // 8
    return compress(by_id[first : last + 1], (mask >> 8 * first).to_bytes(last - first + 1, "little"))
