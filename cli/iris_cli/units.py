"""Sizes and cores for people, as the console writes them (``scheduler.core.units`` on the
server): the CLI is its own distribution and imports nothing of the server, so it carries the
two formatters it shows API numbers with; ``tests/cli/test_arguments.py`` holds them equal to
the server's on every size and core count it generates.
"""

from __future__ import annotations

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# An amount is shown exactly in a unit only below this many of it: nobody types 8,964,716Ki.
EXACT_BELOW = 10_000

# Largest first; at equal size the binary unit first (the cluster's hosts declare binary sizes).
SIZE_UNITS = (
    ("PiB", 1 << 50),
    ("PB", 10**15),
    ("TiB", 1 << 40),
    ("TB", 10**12),
    ("GiB", GIB),
    ("GB", 10**9),
    ("MiB", MIB),
    ("MB", 10**6),
    ("KiB", KIB),
    ("kB", 10**3),
)


def _amount(hundredths: int) -> str:
    """Hundredths as a number with thousands separators and no trailing zeros: 150 -> 1.5."""
    whole, frac = divmod(hundredths, 100)
    return f"{whole:,}" + (f".{frac:02d}".rstrip("0") if frac else "")


def format_memory(n_bytes: int) -> str:
    """``8000000000`` -> ``8 GB``, ``17179869184`` -> ``16 GiB``, ``1610612736`` -> ``1.5 GiB``,
    ``512`` -> ``512 bytes``; negative amounts show as 0."""
    n_bytes = max(int(n_bytes), 0)
    for unit, factor in SIZE_UNITS:
        if factor <= n_bytes < EXACT_BELOW * factor and (n_bytes * 100) % factor == 0:
            return f"{_amount(n_bytes * 100 // factor)} {unit}"
    if n_bytes >= GIB:
        return f"{n_bytes / GIB:,.1f} GiB"
    if n_bytes >= MIB:
        return f"{n_bytes / MIB:,.1f} MiB"
    return f"{n_bytes:,} byte" + ("" if n_bytes == 1 else "s")


MILLICORES_PER_CORE = 1000


def format_cores(millicores: int) -> str:
    """``8000`` -> ``8 cores``, ``1000`` -> ``1 core``, ``500`` -> ``0.5 cores``, ``1000000000``
    -> ``1,000,000 cores``; negative amounts show as 0."""
    millicores = max(int(millicores), 0)
    if millicores % MILLICORES_PER_CORE == 0:
        cores = millicores // MILLICORES_PER_CORE
        return f"{cores:,} {'core' if cores == 1 else 'cores'}"
    return f"{millicores / MILLICORES_PER_CORE:,.3g} cores"
