"""The snapshot reader's field checks: each returns the value or raises :class:`SnapshotError`
with the JSON path of the field in its message; and :func:`once_per_json_text`, which checks a
value repeated across a snapshot once."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

import orjson

from scheduler.core.bands import BAND_NAMES, Band


class SnapshotError(ValueError):
    """A snapshot JSON document is malformed; the message starts with the JSON path."""


# -- validation helpers -------------------------------------------------------------------------


def fail(path: str, message: str) -> SnapshotError:
    return SnapshotError(f"{path or 'snapshot'}: {message}")


def at_path(path: str, key: str | None) -> str:
    """The path of ``key`` inside ``path``; built only for an error message."""
    return path if key is None else join_path(path, key)


def json_object(value: Any, path: str, allowed: AbstractSet[str]) -> dict:
    if not isinstance(value, dict):
        raise fail(path, "expected an object")
    if not value.keys() <= allowed:
        unknown = sorted(set(value) - allowed)
        raise fail(join_path(path, unknown[0]), f"unknown field; expected one of {', '.join(sorted(allowed))}")
    return value


def json_list(value: Any, path: str, key: str | None = None) -> list:
    if not isinstance(value, list):
        raise fail(at_path(path, key), "expected a list")
    return value


def json_int(value: Any, path: str, key: str | None = None, minimum: int = 0) -> int:
    if value.__class__ is not int or value < minimum:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise fail(
                at_path(path, key),
                "expected a non-negative integer" if minimum == 0 else f"expected an integer >= {minimum}",
            )
    return value


def json_str(value: Any, path: str, key: str | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise fail(at_path(path, key), "expected a non-empty string")
    return value


def json_bool(value: Any, path: str, key: str | None = None) -> bool:
    if not isinstance(value, bool):
        raise fail(at_path(path, key), "expected true or false")
    return value


# Bands by their wire name: the spelling snapshots use, looked up before the general parse.
BANDS_BY_WIRE = {band.wire: band for band in Band}


def json_band(value: Any, path: str, key: str | None = None) -> Band:
    band = BANDS_BY_WIRE.get(value) if isinstance(value, str) else None
    if band is not None:
        return band
    if not isinstance(value, str):
        raise fail(at_path(path, key), f"expected one of {BAND_NAMES}")
    try:
        return Band.parse(value)
    except ValueError:
        raise fail(at_path(path, key), f"expected one of {BAND_NAMES}") from None


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# What ``orjson.dumps`` may not write as JSON (it raises instead): a document holding anything
# but JSON's own types is not spelled by its text.
JSON_TEXT_ONLY = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def once_per_json_text(
    validated: dict[bytes, Any],
    raw: Any,
    build: Callable[[Any, dict[object, object]], Any],
    shared: dict[object, object],
) -> Any:
    """``build(raw, shared)`` (a validated value, or None), built once per JSON text of ``raw``:
    thousands of jobs repeat a few requests and constraint lists, and the text of a value
    (``orjson.dumps``, in C) costs less than checking it field by field again. None also where
    ``raw`` has no JSON text (it holds something a JSON parser does not return). ``validated``
    holds one kind of value (a dict per kind), keyed by the text alone."""
    try:
        key = orjson.dumps(raw, option=JSON_TEXT_ONLY)
    except orjson.JSONEncodeError:
        return None
    value = validated.get(key)
    if value is None:
        value = build(raw, shared)
        if value is not None:
            validated[key] = value
    return value


# -- snapshot from JSON -------------------------------------------------------------------------
