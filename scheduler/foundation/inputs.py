"""Parsers for the values callers send: raw JSON or form values in, clean values out.

Every use case validates its arguments with these, so the API, the console and the CLI get the
same INVALID_ARGUMENT messages naming the field. They accept both ``8`` and ``"8"``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.core.bands import BAND_NAMES, Band
from scheduler.core.budget import MAX_BUDGET_POINTS
from scheduler.core.types import DeviceType
from scheduler.core.units import format_duration_seconds
from scheduler.foundation.errors import InvalidArgument
from scheduler.models import MAX_ID_LENGTH

# One segment of a job id: what Django allows in usernames, so a username is always a segment.
# No ':' (it starts a custom verb in the API's URLs) and no '/' (the separator).
SEGMENT = re.compile(r"^[A-Za-z0-9_.@+-]+$")

# Storage bounds, so no value reaches the database that it cannot hold.
MAX_INT32 = 2**31 - 1

MAX_INT64 = 2**63 - 1

# Bounds on a task's request. Far above any real host; they keep arithmetic and columns sane.
MAX_CPU_CORES = 1_000_000

MAX_MEMORY_BYTES = 2**60  # 1024 PiB, stated so in messages

MAX_DEVICE_COUNT = 1_000_000

MAX_TEXT = 10_000

MEMORY_UNITS = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
    "pi": 2**50,
}

# At most 30 digits before the point: more cannot be a size below MAX_MEMORY_BYTES, and it keeps
# the arithmetic cheap whatever a caller sends (a 400-digit number once overflowed a float).
MEMORY_PATTERN = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([kmgtp]i?)?(b(?:ytes?)?)?\s*$", re.IGNORECASE)
# A size given as a plain integer is bytes; below this it cannot be meant (no task runs in less
# than a MiB), so it is refused with the size it most likely meant, as a unitless string is.
MIN_UNITLESS_BYTES = 1 << 20
# One millicore is the smallest CPU request a worker can account; less would round to nothing.
MIN_CPU_CORES = 0.001
# What a task asks for when the caller does not say.
DEFAULT_CPU_CORES = 1
DEFAULT_MEMORY_BYTES = 1 << 30


def check_text(value: str, name: str) -> str:
    """Reject what no column can store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise InvalidArgument("must not contain NUL characters", field=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("must be valid Unicode text", field=name) from None
    return value


def parse_text(value: Any, name: str, *, required: bool = False, max_length: int = MAX_TEXT) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidArgument(f"expected a string, got {type(value).__name__}", field=name)
    value = check_text(value.strip(), name)
    if required and not value:
        raise InvalidArgument("required", field=name)
    if len(value) > max_length:
        raise InvalidArgument(f"at most {max_length} characters", field=name)
    return value


def parse_int(
    value: Any, name: str, *, minimum: int = 0, maximum: int = MAX_INT32, default: int | None = None, unit: str = ""
) -> int:
    """An integer within ``[minimum, maximum]``; a bound is stated with ``unit`` ("60 seconds")."""
    if value is None or value == "":
        if default is None:
            raise InvalidArgument("required", field=name)
        return default
    if isinstance(value, bool):
        raise InvalidArgument("expected an integer", field=name)
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgument(f"expected an integer, got {value!r}", field=name)
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidArgument(f"expected an integer, got {value!r}", field=name) from None
    elif not isinstance(value, int):
        raise InvalidArgument(f"expected an integer, got {type(value).__name__}", field=name)
    suffix = f" {unit}" if unit else ""
    if value < minimum:
        raise InvalidArgument(f"must be at least {minimum:,}{suffix}", field=name)
    if value > maximum:
        raise InvalidArgument(f"must be at most {maximum:,}{suffix}", field=name)
    return value


def parse_number(value: Any, name: str, *, minimum: float = 0, maximum: float, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise InvalidArgument("expected a number", field=name)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InvalidArgument(f"expected a number, got {value!r}", field=name) from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument("expected a finite number", field=name)
    if value < minimum:
        raise InvalidArgument(f"must be at least {minimum:g}", field=name)
    if value > maximum:
        raise InvalidArgument(f"must be at most {maximum:g}", field=name)
    return float(value)


def parse_band(value: Any, name: str) -> Band:
    """A band by name (``"batch"``, ``"BATCH"``). Ranks are not accepted on the wire: ``0`` is
    SYSTEM, which nobody should reach by sending a number that looks like "nothing"."""
    if not isinstance(value, str):
        raise InvalidArgument(f"expected a band name, one of {BAND_NAMES}", field=name)
    check_text(value, name)
    if value.strip().isdigit():
        raise InvalidArgument(f"expected a band name, one of {BAND_NAMES}, not a rank", field=name)
    try:
        return Band.parse(value)
    except ValueError:
        raise InvalidArgument(f"unknown band {value!r}; expected one of {BAND_NAMES}", field=name) from None


def _missing_unit(number: Any, name: str) -> InvalidArgument:
    return InvalidArgument(
        f"{number} has no unit: did you mean {number}Gi? Write the unit: 512Mi, {number}Gi, {number}G "
        f"(or {number}B for bytes)",
        field=name,
        details={"suggestion": f"{number}Gi"},
    )


def parse_memory(value: Any, name: str = "memory") -> int:
    """Bytes from a string with a unit (``16Gi``, ``512Mi``, ``2G``, ``1.5Gi``, ``4096B``) or an
    integer of bytes. A string without a unit (``"8"``) and an integer below a MiB are refused
    with "did you mean 8Gi?": they were accepted as 8 bytes, which no task can run in."""
    if value is None or value == "":
        return DEFAULT_MEMORY_BYTES
    if isinstance(value, bool):
        raise InvalidArgument("expected bytes as an integer or a size like '16Gi'", field=name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        amount = value
        if 0 < amount < MIN_UNITLESS_BYTES:
            raise _missing_unit(amount, name)
    elif isinstance(value, str):
        match = MEMORY_PATTERN.match(value)
        if not match:
            raise InvalidArgument(f"cannot read {value!r} as a size; use bytes or a unit: 512Mi, 16Gi, 2G", field=name)
        number, unit, explicit_bytes = match.groups()
        if not unit and not explicit_bytes and Decimal(number) != 0:
            raise _missing_unit(number, name)
        try:
            amount = int(Decimal(number) * MEMORY_UNITS[(unit or "").lower()])
        except InvalidOperation:  # pragma: no cover - the pattern admits only plain decimals
            raise InvalidArgument(f"cannot read {value!r} as a size", field=name) from None
    else:
        raise InvalidArgument("expected bytes as an integer or a size like '16Gi'", field=name)
    if amount < 0:
        raise InvalidArgument("must not be negative", field=name)
    if amount > MAX_MEMORY_BYTES:
        raise InvalidArgument(f"must be at most {format_size(MAX_MEMORY_BYTES)}", field=name)
    return amount


def format_size(amount: int) -> str:
    """Bytes in the largest binary unit that divides them: ``1024Pi``, ``32Gi``, ``1536``."""
    for unit in ("pi", "ti", "gi", "mi", "ki"):
        factor = MEMORY_UNITS[unit]
        if amount and amount % factor == 0:
            return f"{amount // factor:,}{unit.capitalize()}"
    return f"{amount:,} bytes"


def parse_cpu_millicores(value: Any, name: str = "cpu", *, allow_zero: bool = False) -> int:
    """Cores (``2``, ``0.5``) as millicores. A task's request must be at least one millicore (a
    task of 0 cores ran with no resources at all); a worker may declare 0 (``allow_zero``). An
    amount below one millicore is refused rather than rounded to nothing."""
    cores = parse_number(value, name, maximum=MAX_CPU_CORES, default=DEFAULT_CPU_CORES)
    if cores == 0 and allow_zero:
        return 0
    if cores < MIN_CPU_CORES:
        least = f"0 or at least {MIN_CPU_CORES}" if allow_zero else f"at least {MIN_CPU_CORES}"
        raise InvalidArgument(f"must be {least} cores (one millicore)", field=name)
    return round(cores * 1000)


def parse_budget_limit(value: Any, name: str = "budget_limit") -> int:
    """Points, 0 meaning unlimited, at most :data:`MAX_BUDGET_POINTS`."""
    return parse_int(value, name, maximum=MAX_BUDGET_POINTS, unit="points")


@dataclass(frozen=True)
class DeviceRequest:
    type: DeviceType = DeviceType.CPU
    variant: str = ""
    count: int = 0

    def as_json(self) -> dict[str, Any]:
        if self.type is DeviceType.CPU:
            return {"type": "cpu"}
        return {"type": self.type.value, "variant": self.variant, "count": self.count}


def parse_device(value: Any, name: str = "device") -> DeviceRequest:
    """``{"type": "cpu"}``, ``{"type": "gpu", "variant": "h100", "count": 8}`` or the TPU form."""
    if value is None:
        return DeviceRequest()
    if not isinstance(value, Mapping):
        raise InvalidArgument('expected an object like {"type": "gpu", "variant": "h100", "count": 8}', field=name)
    raw_type = value.get("type", "cpu")
    try:
        kind = DeviceType(raw_type.lower() if isinstance(raw_type, str) else raw_type)
    except ValueError:
        raise InvalidArgument(
            f"unknown device type {raw_type!r}; expected cpu, gpu or tpu", field=f"{name}.type"
        ) from None
    if kind is DeviceType.CPU:
        return DeviceRequest()
    variant = parse_text(value.get("variant"), f"{name}.variant", required=True, max_length=64)
    if not SEGMENT.match(variant):
        raise InvalidArgument("letters, digits and . _ - + @ only", field=f"{name}.variant")
    if value.get("count") in (None, "") and kind is DeviceType.TPU:
        raise InvalidArgument(
            f"required: how many {variant} chips each task uses (a slice type such as {variant} names the "
            f'slice, not one task\'s share of it), e.g. {{"type": "tpu", "variant": "{variant}", "count": 4}} '
            f"or iris job run --tpu {variant}:4",
            field=f"{name}.count",
        )
    count = parse_int(value.get("count"), f"{name}.count", minimum=1, maximum=MAX_DEVICE_COUNT)
    return DeviceRequest(kind, variant, count)


def parse_duration_seconds(value: Any, name: str, *, minimum: int, maximum: int) -> int:
    """Whole seconds within ``[minimum, maximum]``; a bound is stated as ``--duration`` takes
    it, then in seconds: "must be at most 90d (7,776,000 seconds)"."""
    try:
        return parse_int(value, name, minimum=minimum, maximum=maximum, unit="seconds")
    except InvalidArgument as error:
        for word, bound in (("least", minimum), ("most", maximum)):
            plain = f"must be at {word} {bound:,} seconds"
            if error.message.endswith(plain):
                raise InvalidArgument(
                    f"must be at {word} {format_duration_seconds(bound)} ({bound:,} seconds)",
                    field=name,
                    details={**{k: v for k, v in error.details.items() if k != "field"}, "limit_seconds": bound},
                ) from None
        raise


def _attribute_value(value: Any, name: str) -> str:
    """Attribute values are strings; numbers are accepted and compared as their text."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument("expected a string", field=name)
    text = value if isinstance(value, str) else str(value)
    return check_text(text, name)[:255]


def parse_attributes(value: Any, name: str = "attributes") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument('expected an object of string attributes, e.g. {"tpu-name": "v5p-a"}', field=name)
    result = {}
    for key, raw in value.items():
        key = check_text(str(key), f"{name}.{key}")
        if not key.strip():
            raise InvalidArgument("attribute names must not be empty", field=name)
        result[key] = _attribute_value(raw, f"{name}.{key}")
    return result


def parse_segment(value: str, name: str) -> str:
    if not SEGMENT.match(value) or value in {".", ".."}:
        raise InvalidArgument(
            f"{value!r} is not a valid name: use letters, digits and . _ - + @ (no ':' and no spaces)", field=name
        )
    return value


def parse_user_id(value: Any, name: str = "user") -> str:
    user = parse_text(value, name, required=True, max_length=150)
    return parse_segment(user, name)


def parse_worker_name(value: Any, name: str = "name") -> str:
    return parse_segment(parse_text(value, name, required=True, max_length=MAX_ID_LENGTH), name)
