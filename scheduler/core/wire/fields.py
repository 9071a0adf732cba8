"""The snapshot reader's field checks: each returns the value or raises :class:`SnapshotError`
with the JSON path of the field in its message."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

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


# -- snapshot from JSON -------------------------------------------------------------------------
