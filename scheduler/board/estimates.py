"""Start estimates as readers see them: the stored rows (written by
:mod:`scheduler.tick.estimates`), and how an estimate reads at a given moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from scheduler.models import EstimatedStart


def estimates_for_tasks(task_names: Iterable[str]) -> dict[str, EstimatedStart]:
    """The stored estimates of these tasks (task name -> row), in one query."""
    names = list(task_names)
    if not names:
        return {}
    return {e.task: e for e in EstimatedStart.objects.filter(task__in=names)}


def estimates_for_job(job_name: str) -> dict[str, EstimatedStart]:
    """The stored estimates of one job's tasks (task name -> row), in one query."""
    return {e.task: e for e in EstimatedStart.objects.filter(job=job_name)}


def estimate_data(row: EstimatedStart | None) -> tuple[dict | None, str]:
    """The API's ``estimated_start`` (``{p50, p90, method, as_of}`` as ISO times, or None) and,
    when None, why (``estimated_start_reason``)."""
    if row is None:
        return None, "not estimated yet: the estimator has not run since this task was queued"
    if row.p50_ms is None:
        return None, row.reason
    return {"p50": _iso(row.p50_ms), "p90": _iso(row.p90_ms), "method": row.method, "as_of": _iso(row.as_of_ms)}, ""


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def wait_text(row: EstimatedStart | None, now_ms: int) -> str:
    """"would start in about 20-45 min" (relative to ``now_ms``), or why there is no estimate."""
    span = start_span(row, now_ms)
    if span is None:
        return estimate_data(row)[1]
    return f"would start {span}"


def start_span(row: EstimatedStart | None, now_ms: int) -> str | None:
    """"in about 20-45 min" / "within a minute" (relative to ``now_ms``), or None without an
    estimate (``estimate_data`` says why)."""
    if row is None or row.p50_ms is None:
        return None
    low, high = max(0, row.p50_ms - now_ms), max(0, row.p90_ms - now_ms)
    if high < 60_000:
        return "within a minute"
    return f"in about {_span(low, high)}"


def _span(low_ms: int, high_ms: int) -> str:
    def unit(ms: int) -> tuple[int, str]:
        minutes = round(ms / 60_000)
        return (minutes, "min") if minutes < 120 else (round(ms / 3_600_000), "h")

    (a, ua), (b, ub) = unit(low_ms), unit(high_ms)
    if a == b and ua == ub:
        return f"{a} {ua}"
    if ua == ub:
        return f"{a}-{b} {ua}"
    return f"{a} {ua}-{b} {ub}"


def estimate_behind(task_ahead: str | None, would_place: bool, now_ms: int) -> tuple[dict | None, str]:
    """A hypothetical task's estimate (the what-if answer): placed at once if ``would_place``,
    else no earlier than the stored estimate of ``task_ahead``, the task just ahead of it in its
    band's queue. Returns ``(estimated_start, text)``, e.g. ``"would start in about 20-45 min"``.
    One query, whatever the answer (so the what-if's query count does not depend on its place)."""
    row = estimates_for_tasks([task_ahead or ""]).get(task_ahead or "")
    if would_place:
        return None, "would start at the next tick"
    if task_ahead is None:
        return None, "no estimate: nothing is queued ahead of it to measure by, and it does not fit now"
    data, reason = estimate_data(row)
    if data is None:
        return None, f"no estimate for the task ahead of it ({reason})"
    return data, wait_text(row, now_ms) + f" (after {task_ahead}, just ahead of it)"
