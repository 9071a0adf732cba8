"""Reasons as records (code and parameters, what the tick stores and the API returns) and the
one rendering of a record for people (``pending_text``, ``cause_text``, ``downgrade_text``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from scheduler.core.bands import Band
from scheduler.core.explain.text import RESOURCE_FORMAT, number
from scheduler.core.explain.reasons import Downgrade, InsufficientResource, NeverFits, PendingReason, _CAUSE_TYPES


# ``insufficient_<resource>``: one dataclass, the resource is a parameter.
_INSUFFICIENT = {f"insufficient_{r}" for r in RESOURCE_FORMAT}

# Reasons the shell gives for tasks the core did not explain (no tick has seen them yet, or a
# stored record it cannot read): code -> text.
SHELL_TEXT = {
    "not_yet_ticked": "Waiting for the next scheduling tick",
    "unknown": "No reason recorded",
}


# A cause type's public field names, by type: ``dataclasses.fields`` rebuilds its tuple on every
# call, most of a record's cost when a tick turns thousands of reasons into records.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _public_fields(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls) if not f.name.startswith("_"))
    return names


def cause_record(cause: object) -> dict:
    """The JSON form of a cause: its code and its fields (a nested cause as its own record)."""
    record = getattr(cause, "record", None)
    if callable(record):  # causes defined outside this module (Kubernetes waits)
        return record()
    out: dict = {"code": cause.code}
    for name in _public_fields(type(cause)):
        value = getattr(cause, name)
        if name == "cause":
            value = cause_record(value)
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[name] = value
    return out


def reason_record(reason: object) -> dict:
    """The JSON form of a pending reason (a :class:`PendingReason`, or a bare cause)."""
    if isinstance(reason, PendingReason):
        out = cause_record(reason.cause)
        if reason.downgrade is not None:
            d = reason.downgrade
            out["downgrade"] = {
                "requested": d.requested.wire,
                "effective": d.effective.wire,
                "spend": d.spend,
                "limit": d.limit,
            }
        return out
    return cause_record(reason)


def _cause_from_record(record: Mapping) -> object | None:
    code = record.get("code")
    cls = InsufficientResource if code in _INSUFFICIENT else _CAUSE_TYPES.get(code)
    if cls is None:
        return None
    # Only the cause's own numbers: a served reason also carries its text, band and place.
    names = {f.name for f in fields(cls)}
    params = {k: v for k, v in record.items() if k in names}
    if "cause" in params:
        params["cause"] = _cause_from_record(params["cause"])
    if "constraints" in params:
        params["constraints"] = tuple(params["constraints"])
    if cls is NeverFits:
        params["requirements"] = tuple(tuple(r) for r in params.get("requirements", ()))
        params["largest"] = tuple(params["largest"]) if params.get("largest") else None
    try:
        return cls(**params)
    except TypeError:
        return None


def _downgrade_from_record(record: Mapping | None) -> Downgrade | None:
    if not record:
        return None
    return Downgrade(Band.parse(record["requested"]), Band.parse(record["effective"]), record["spend"], record["limit"])


def cause_text(record: Mapping) -> str:
    """The cause of a stored reason, for people (without the downgrade or the place)."""
    cause = _cause_from_record(record)
    if cause is not None:
        return cause.text()
    code = record.get("code", "unknown")
    if code in SHELL_TEXT:
        return SHELL_TEXT[code]
    # Imported here: only a stored Kueue reason needs it, and ``manage.py simulate``, which
    # loads this module, would otherwise load (and, without cached bytecode, compile) the
    # whole Kubernetes plan for nothing.
    from scheduler.core.kueue import KUEUE_TEXT

    if code in KUEUE_TEXT:
        return KUEUE_TEXT[code].format(detail=record.get("detail", ""))
    return record.get("text") or SHELL_TEXT["unknown"]


def downgrade_of(record: Mapping) -> Downgrade | None:
    """The downgrade of a stored reason, typed, or None."""
    return _downgrade_from_record(record.get("downgrade"))


def downgrade_text(record: Mapping) -> str | None:
    """The downgrade of a stored reason, for people, or None."""
    downgrade = downgrade_of(record)
    return downgrade.text() if downgrade is not None else None


def place_text(band: Band, position: int, band_count: int, tick: int | None) -> str:
    """``position 3 of 17 in BATCH as of tick 812``: the one wording of a task's place."""
    text = f"position {number(position)} of {number(band_count)} in {band.name}"
    return f"{text} as of tick {tick}" if tick is not None else text


def pending_text(
    record: Mapping,
    band: Band | None = None,
    position: int | None = None,
    band_count: int | None = None,
    tick: int | None = None,
) -> str:
    """THE text of a pending task: cause; place (if queued); downgrade. Every page, the API's
    ``pending_reason.text`` and so the CLI render through here."""
    parts = [cause_text(record)]
    if band is not None and position is not None and band_count is not None:
        parts.append(place_text(band, position, band_count, tick))
    downgrade = downgrade_text(record)
    if downgrade:
        parts.append(downgrade)
    return "; ".join(parts)


# -- computing reasons --------------------------------------------------------------------------
