"""How the reasons word numbers, sizes, times and places."""

from __future__ import annotations

from datetime import datetime, timezone

from scheduler.core import units


# Bytes per MiB: memory below 1 GiB is shown in MiB.
MIB = 1 << 20


def number(n: int) -> str:
    """``12400`` -> ``12,400``."""
    return f"{n:,}"


def _plural(n: int, one: str, many: str) -> str:
    return f"{number(n)} {one if n == 1 else many}"


def format_cores(millicores: int) -> str:
    """``8000`` -> ``8 cores``: :func:`scheduler.core.units.format_cores`."""
    return units.format_cores(millicores)


def format_memory(n_bytes: int) -> str:
    """Bytes for people, in the unit they were likely asked in (``8 GB``, ``16 GiB``):
    :func:`scheduler.core.units.format_memory`."""
    return units.format_memory(n_bytes)


# Per resource: how it is named in reasons, and how an amount (millicores, bytes, devices) reads.
RESOURCE_FORMAT = {
    "cpu": ("CPU", format_cores),
    "memory": ("memory", format_memory),
    "gpu": ("GPUs", lambda n: _plural(max(n, 0), "GPU", "GPUs")),
    "tpu": ("TPU chips", lambda n: _plural(max(n, 0), "TPU chip", "TPU chips")),
}


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC to the second: ``2026-12-02T05:10:03Z``."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(ms: int) -> str:
    """A span for people, to its two largest units: ``3d 4h``, ``2h 5m``, ``12m 3s``, ``45s``."""
    seconds = max(ms, 0) // 1000
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}s"


def ordinal(n: int) -> str:
    """``1`` -> ``1st``, ``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{number(n)}{suffix}"


def deadline_text(deadline_ms: int, now_ms: int) -> str:
    """The UNSCHEDULABLE reason of an expired task: names the deadline and how long ago it passed."""
    when = datetime.fromtimestamp(deadline_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    late_s = (now_ms - deadline_ms) // 1000
    minutes, seconds = divmod(late_s, 60)
    hours, minutes = divmod(minutes, 60)
    ago = f"{hours}h {minutes}m {seconds}s" if hours else f"{minutes}m {seconds}s" if minutes else f"{seconds}s"
    return f"Scheduling deadline exceeded: the deadline {when} (scheduling_deadline_ms={deadline_ms}) passed {ago} before this tick"


# -- causes -------------------------------------------------------------------------------------
