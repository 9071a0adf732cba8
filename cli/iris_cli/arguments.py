"""The CLI's argument types: each parses one option's text or raises ``ArgumentTypeError``, which
argparse turns into a usage error (exit 2); and the constants the options offer."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from iris_cli.client import (
    CliError,
)

# The bands as the API names them, highest first (the server's test ties them to its own).
BANDS = ["system", "production", "interactive", "batch"]
UPLIFT_STATES = ["requested", "approved", "denied", "expired"]
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DURATION_RE = re.compile(r"(\d+)([smhdw])")
FILTER_HELP = (
    "user, band, effective, state, route (workers|kubernetes|unrouted), name (substring), "
    "submitted_after, submitted_before (YYYY-MM-DD or ISO 8601)"
)


class UsageError(Exception):
    """A combination of arguments argparse cannot express; exit 2 like argparse's own errors."""


# --- argument types (raising ArgumentTypeError makes a usage error, exit 2) ------------------------


def duration(text: str) -> int:
    """``90``, ``90s``, ``30m``, ``2h``, ``1h30m``, ``7d``, ``1w`` -> seconds (positive)."""
    text = text.strip().lower()
    if text.isdigit():
        total = int(text)
    else:
        pos, total = 0, 0
        for match in DURATION_RE.finditer(text):
            if match.start() != pos:
                break
            total += int(match.group(1)) * DURATION_UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 90s, 30m, 2h, 1h30m, 7d")
    if total <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be positive")
    return total


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected zero or more, got {text!r}")
    return value


def budget_points(text: str) -> int:
    """A budget limit in points: 0 (unlimited) or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of points (0 = unlimited), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"a budget limit cannot be negative ({text}): give a number of points, or 0 for unlimited"
        )
    return value


def band_name(text: str) -> str:
    """A band as the console and the docs write it (``PRODUCTION``) or as the API does (``production``)."""
    return text.strip().lower()


def cores(text: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of cores (e.g. 2 or 0.5), got {text!r}") from None
    if not value >= 0.001:  # as the server: a task of 0 cores ran with no resources at all
        raise argparse.ArgumentTypeError(f"cpu must be at least 0.001 cores (one millicore), got {text!r}")
    return int(value) if value.is_integer() else value


def memory(text: str) -> str:
    """A size with its unit (``16Gi``, ``512Mi``, ``8G``), sent as typed: the server parses it,
    and refuses a bare number (``8``) with "did you mean 8Gi?" whichever client sent it."""
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("expected a memory size such as 16Gi")
    if text.startswith("-"):
        raise argparse.ArgumentTypeError(f"memory cannot be negative ({text}): give a size such as 16Gi")
    return text


def device(kind: str, count_required: bool) -> Callable[[str], dict]:
    def parse(text: str) -> dict:
        variant, sep, count = text.partition(":")
        variant = variant.strip()
        if not variant or (sep and not count.strip()) or (count_required and not sep):
            form = "VARIANT:COUNT (e.g. h100:8)" if count_required else "VARIANT[:COUNT] (e.g. v5litepod-16)"
            raise argparse.ArgumentTypeError(f"invalid --{kind} {text!r}: expected {form}")
        spec: dict[str, Any] = {"type": kind, "variant": variant}
        if sep:
            spec["count"] = positive_int(count.strip())
        return spec

    return parse


def constraint(soft: bool) -> Callable[[str], dict]:
    """``KEY=VALUE`` (eq), ``KEY!=VALUE`` (ne), ``KEY=A,B`` (in), ``KEY`` (exists)."""

    def parse(text: str) -> dict:
        if "!=" in text:
            key, value = text.split("!=", 1)
            spec: dict[str, Any] = {"key": key, "op": "ne", "value": value}
        elif "=" in text:
            key, value = text.split("=", 1)
            if "," in value:
                spec = {"key": key, "op": "in", "value": [v for v in value.split(",") if v]}
            else:
                spec = {"key": key, "op": "eq", "value": value}
        else:
            spec = {"key": text, "op": "exists"}
        if not spec["key"].strip() or spec.get("value") in ("", []):
            raise argparse.ArgumentTypeError(
                f"invalid constraint {text!r}: expected KEY=VALUE, KEY!=VALUE, KEY=A,B or KEY"
            )
        spec["key"] = spec["key"].strip()
        spec["soft"] = soft
        return spec

    return parse


def job_path(job: str) -> str:
    """``/alice/train`` or ``alice/train`` -> ``jobs/alice/train`` (the API's path form)."""
    job = job.strip().strip("/")
    if not job:
        raise CliError("INVALID_ARGUMENT", "empty job id")
    return f"jobs/{job}"


def default_job_name(command: list[str]) -> str:
    """``train-20260501-120003-3f2a``: the program's name, when, and a tie-breaker."""
    program = os.path.basename(command[0]) if command else "job"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", program).strip("-.") or "job"
    return f"{slug[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def drop_none(body: dict) -> dict:
    return {k: v for k, v in body.items() if v is not None}
