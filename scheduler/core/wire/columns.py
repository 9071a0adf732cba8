"""The reader's checks over a whole list at once: a few passes in C over every item (or every
id) instead of a Python loop with a call per item. Each gives what the per-item checks would for
a list in the usual shape, or None (False) where any item is not in it; the reader then checks
item by item in order, and raises the first problem as before."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from itertools import repeat
from typing import Any

DICT_TYPE = {dict}
STR_TYPE = {str}


def by_id(items: list, keys: AbstractSet[str]) -> dict[str, tuple[int, dict]] | None:
    """``{item["id"]: (position, item)}`` in list order, when every item is a ``dict`` whose
    keys are among ``keys`` and whose ``id`` is a ``str`` no other item has; else None."""
    if not items:
        return {}
    # set().union takes a dict's keys with their stored hashes: half the cost of chaining them.
    if set(map(type, items)) != DICT_TYPE or not keys.issuperset(set().union(*items)):
        return None
    ids = list(map(dict.get, items, repeat(as_parsed(items, ("id",))[0])))
    if set(map(type, ids)) != STR_TYPE:
        return None
    parsed = dict(zip(ids, enumerate(items)))
    return parsed if len(parsed) == len(items) else None


def all_job_ids(ids: Any) -> bool:
    """Whether every one of ``ids`` (a collection of ``str``) is a job id as
    ``read.JOB_ID`` matches it: ``/`` then at least two segments of neither ``/`` nor
    whitespace. Checked on the ids joined (a ``re`` match per id costs twice as much): no
    whitespace in any (``str.split`` and ``\\s`` agree on what whitespace is), each starts with
    ``/`` (so every newline of the joined text is a separator and is followed by one), none has
    an empty segment or ends with ``/``, and each holds at least two ``/``."""
    if not ids:
        return True
    concatenated = "".join(ids)
    words = concatenated.split()
    if len(words) != 1 or len(words[0]) != len(concatenated):
        return False
    joined = "\n".join(ids)
    return (
        joined.startswith("/")
        and joined.count("\n/") == len(ids) - 1
        and "//" not in joined
        and "/\n" not in joined
        and not joined.endswith("/")
        and min(map(str.count, ids, repeat("/"))) >= 2
    )


def as_parsed(items: list, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` spelled by the parser's own key strings, those of ``items[0]`` (as given where
    it has no such key of type ``str``, or is not an object).

    orjson gives every object the same string for a key it has seen (its key cache), but not
    the interned string of the code's literal, and its objects are dicts of the general kind:
    a look-up by the literal compares the text after the hash, one by the parser's own string
    matches it by identity (a third fewer instructions a look-up, hundreds of thousands in a
    large snapshot). Only the cost depends on this: equal strings find the same entry."""
    first = items[0] if items and items[0].__class__ is dict else {}
    # Only plain strings: a subclass's own hash or equality never stands in for a name.
    spelled = {key: key for key in first if key.__class__ is str}
    return tuple(spelled.get(name, name) for name in names)
