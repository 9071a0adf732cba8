"""Spend-over-time charts drawn as inline SVG on the server: geometry here, markup in templates.

No JavaScript chart library: a chart is a few polylines whose points are computed from the
ticks' spend and limit samples. A limit of 0 (unlimited) draws no limit line for that stretch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.budgets.queries import SpendSample
from scheduler.tick.fairness import SharePoint


@dataclass
class Plot:
    """A chart's frame: size, margins, axis ticks, how many samples it draws."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    x_ticks: list[tuple[float, str, str]] = field(default_factory=list)  # x, label, text-anchor
    samples: int = 0

    @property
    def empty(self) -> bool:
        return self.samples == 0

    @property
    def plot_right(self) -> int:
        return self.width - self.right

    @property
    def plot_bottom(self) -> int:
        return self.height - self.bottom


@dataclass
class Chart(Plot):
    """A user's spend and limit over time."""

    spend: str = ""  # polyline points
    area: str = ""  # polygon under the spend line
    limits: list[str] = field(default_factory=list)  # one polyline per stretch with a limit
    over: list[tuple[float, float]] = field(default_factory=list)  # samples over the limit
    last_spend: int = 0
    last_limit: int = 0
    peak: int = 0
    start: datetime | None = None
    end: datetime | None = None


def time_axis(times: list[datetime], x0: int, x1: int) -> tuple[Callable[[int], float], list[tuple[float, str, str]]]:
    """The x of sample ``i`` (by its time, between ``x0`` and ``x1``; a lone sample at ``x1``) and
    three labelled ticks: first, middle and last sample (hours and minutes within two days)."""
    span = (times[-1] - times[0]).total_seconds() or 1.0

    def x(i: int) -> float:
        if len(times) == 1:
            return float(x1)
        return round(x0 + (x1 - x0) * (times[i] - times[0]).total_seconds() / span, 1)

    fmt = "%H:%M" if span < 2 * 86400 else "%b %d"
    middle = (x0 + x1) / 2
    ticks = [
        (x(i), times[i].strftime(fmt), "end" if x(i) > middle + 1 else "middle" if x(i) > x0 else "start")
        for i in sorted({0, len(times) // 2, len(times) - 1})
    ]
    return x, ticks


def nice_ceiling(value: float) -> int:
    """The next round number at or above ``value`` (1, 2, 2.5, 5 × 10^k), for the y axis."""
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(step * magnitude)
    return int(10 * magnitude)


def round_step(top: int) -> int:
    """How many gridlines divide ``top`` into round steps (1, 2 or 5 × 10^k): 50 -> 5, 20 -> 4."""
    for divisions in (5, 4, 2):
        step, rest = divmod(top, divisions)
        if rest == 0 and step and str(step).rstrip("0") in {"1", "2", "5"}:
            return divisions
    return 1


def short_number(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:g}M"
    if n >= 10_000:
        return f"{n / 1000:g}k"
    return f"{int(n):,}"


def spend_chart(
    samples: list[SpendSample],
    user: str,
    default_limit: int,
    *,
    width: int = 640,
    height: int = 180,
    axes: bool = True,
) -> Chart:
    """A chart of ``user``'s spend and limit over ``samples`` (oldest first)."""
    margins = (56, 12, 10, 24) if axes else (1, 1, 2, 2)
    chart = Chart(width, height, *margins)
    if not samples:
        return chart
    spends = [int(s.spend.get(user, 0)) for s in samples]
    limits = [int(s.limits.get(user, default_limit)) for s in samples]
    chart.samples = len(samples)
    chart.start, chart.end = samples[0].at, samples[-1].at
    chart.last_spend, chart.last_limit = spends[-1], limits[-1]
    chart.peak = max(spends)
    top_value = nice_ceiling(max(max(spends), max(limits)) * 1.1)
    x0, x1 = chart.left, width - chart.right
    y0, y1 = chart.top, height - chart.bottom
    x, x_ticks = time_axis([sample.at for sample in samples], x0, x1)

    def y(v: int) -> float:
        return round(y1 - (y1 - y0) * v / top_value, 1)

    points = [(x(i), y(v)) for i, v in enumerate(spends)]
    if len(points) == 1:
        points.insert(0, (float(x0), points[0][1]))
    chart.spend = " ".join(f"{a},{b}" for a, b in points)
    chart.area = f"{points[0][0]},{y1} " + chart.spend + f" {points[-1][0]},{y1}"
    stretch: list[str] = []
    for i, limit in enumerate(limits):
        if limit > 0:
            stretch.append(f"{x(i)},{y(limit)}")
        elif stretch:
            chart.limits.append(" ".join(stretch))
            stretch = []
        if limit > 0 and spends[i] > limit:
            chart.over.append((x(i), y(spends[i])))
    if stretch:
        if len(stretch) == 1:
            stretch.insert(0, f"{x0},{stretch[0].split(',')[1]}")
        chart.limits.append(" ".join(stretch))
    if axes:
        divisions = round_step(top_value)
        chart.y_ticks = [
            (y(top_value * k // divisions), short_number(top_value * k // divisions)) for k in range(divisions + 1)
        ]
        chart.x_ticks = x_ticks
    return chart


@dataclass
class ShareChart(Plot):
    """One band's share of running value by user over time: a polyline per user (0 to 100%)."""

    lines: list[tuple[str, str, int]] = field(default_factory=list)  # user, points, colour index


# Distinct line colours of the share chart (CSS classes share-0 .. share-7); users beyond reuse them.
SHARE_COLOURS = 8
# Users drawn as lines of their own: those with the largest shares over the window, one per
# colour less one; the rest are one line, "N other users" (their shares summed). A line per user
# was 2.6 MB of SVG for a band of 400 users over a day's 120 samples (docs/benchmarks.md, "A year
# of history"), and its colours repeated every eighth user.
SHARE_LINES = SHARE_COLOURS - 1


def share_chart(series: list[tuple[datetime, SharePoint]], *, width: int = 640, height: int = 160) -> ShareChart:
    """A chart of each user's share of one band's running value over ``series`` (oldest first);
    a user missing from a point counts as 0 there (no demand, or outranked: each point keeps the
    largest users and sums the rest). Past ``SHARE_LINES + 1`` users, the ``SHARE_LINES`` with
    the largest shares over the window have lines and the rest share one, their shares summed."""
    chart = ShareChart(width, height, 40, 12, 10, 24)
    if not series:
        return chart
    chart.samples = len(series)
    totals: dict[str, float] = {}
    for _, point in series:
        for u, share in point.shares.items():
            totals[u] = totals.get(u, 0.0) + share
    users = sorted(totals)
    rests = any(point.rest for _, point in series)
    if len(users) > SHARE_LINES + 1 or rests:  # one line for the rest only where it stands for two or more
        drawn = set(sorted(users, key=lambda u: (-totals[u], u))[:SHARE_LINES])
        others = [u for u in users if u not in drawn]
        users = [u for u in users if u in drawn]
    else:
        others = []
    x0, x1 = chart.left, width - chart.right
    y0, y1 = chart.top, height - chart.bottom
    x, chart.x_ticks = time_axis([at for at, _ in series], x0, x1)

    def y(share: float) -> float:
        return round(y1 - (y1 - y0) * share, 1)

    def line(label: str, share_at, colour: int) -> None:
        points = [f"{x(i)},{y(share_at(point))}" for i, (_, point) in enumerate(series)]
        if len(points) == 1:
            points.insert(0, f"{x0},{points[0].split(',')[1]}")
        chart.lines.append((label, " ".join(points), colour))

    for n, user in enumerate(users):
        line(user, lambda point, user=user: point.shares.get(user, 0.0), n % SHARE_COLOURS)
    if others or rests:
        line(
            "other users" if rests else f"{len(others)} other users",
            lambda point: min(1.0, point.rest + sum(point.shares.get(u, 0.0) for u in others)),
            SHARE_COLOURS - 1,
        )
    chart.y_ticks = [(y(k / 4), f"{k * 25}%") for k in range(5)]
    return chart
