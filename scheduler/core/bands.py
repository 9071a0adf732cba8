"""The four priority bands and their ranks.

Lower rank runs first. Everything that orders or compares bands compares ranks, never names,
so SYSTEM (rank 0) sorts ahead of PRODUCTION without special cases.
"""

from __future__ import annotations

from enum import IntEnum


class Band(IntEnum):
    """A priority band; the integer value is the rank (lower runs first)."""

    SYSTEM = 0
    PRODUCTION = 1
    INTERACTIVE = 2
    BATCH = 3

    @property
    def wire(self) -> str:
        """Lower-case name used in JSON snapshots, the API and the CLI."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | Band) -> Band:
        """Accept a band name in any case or a rank; raise ValueError naming the bad value."""
        if isinstance(value, Band):
            return value
        if isinstance(value, bool):
            raise ValueError(f"unknown band {value!r}")
        if isinstance(value, int):
            try:
                return cls(value)
            except ValueError:
                raise ValueError(f"unknown band {value!r}; expected one of {BAND_NAMES}") from None
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValueError(f"unknown band {value!r}; expected one of {BAND_NAMES}") from None
        raise ValueError(f"unknown band {value!r}; expected one of {BAND_NAMES}")


BAND_NAMES = "system|production|interactive|batch"

# Bands only admins may request. They are never budget-downgraded.
ADMIN_BANDS = frozenset({Band.SYSTEM, Band.PRODUCTION})

BANDS_IN_ORDER = tuple(sorted(Band))
