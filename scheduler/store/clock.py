"""The shell's clock. The core never reads a clock: the shell passes it ``now`` in milliseconds
since the epoch, the unit every core timestamp uses."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch, now."""
    return int(time.time() * 1000)
