"""Start estimates as readers see them: the stored rows (written by
:mod:`scheduler.tick.estimates` on the schedule :func:`estimator_schedule` gives), and how each
reads at the moment it is shown.

An estimate is a prediction made at its ``as_of``; by the time a page shows it, its p90 may
have passed with the task still waiting. Such an estimate is never shown as it was: it is
conditioned on the wait so far (the observed waits of the task's band that were longer than
it has waited, as the estimator's own fallback does) and says so ("later than estimated (by
15:28Z); now in about 5-12 min"), or, when fewer than ``MIN_SAMPLES`` of them waited longer
than its job has (or the band has too few waits known at all), it says which and shows no range. A shown p90 is therefore never in the past.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings

from scheduler.core.bands import Band
from scheduler.core.estimate import METHOD_WAIT_HISTORY, MIN_SAMPLES, conditioned_on_wait
from scheduler.models import EstimatedStart, EstimateWaits, Job


@dataclass(frozen=True, slots=True)
class ShownEstimate:
    """A pending task's start estimate as shown at one moment: the range (``p50_ms``,
    ``p90_ms``, both set or both None), how it was made (``method``) and from what cluster
    state (``as_of_ms``), why there is no range (``reason``), and, when the stored estimate's
    p90 passed before the task started, that p90 (``passed_p90_ms``)."""

    p50_ms: int | None
    p90_ms: int | None
    method: str = ""
    as_of_ms: int | None = None
    reason: str = ""
    passed_p90_ms: int | None = None

    @property
    def late(self) -> bool:
        return self.passed_p90_ms is not None

    def data(self) -> dict | None:
        """The API's ``estimated_start`` (ISO times), or None (``reason`` says why)."""
        if self.p50_ms is None:
            return None
        return {
            "p50": _iso(self.p50_ms),
            "p90": _iso(self.p90_ms),
            "method": self.method,
            "as_of": _iso(self.as_of_ms),
            "late": self.late,
            "passed_p90": _iso(self.passed_p90_ms) if self.late else None,
        }

    def span(self, now_ms: int) -> str | None:
        """ "in about 20-45 min" / "within a minute" (relative to ``now_ms``), or None without a
        range."""
        if self.p50_ms is None:
            return None
        low, high = max(0, self.p50_ms - now_ms), max(0, self.p90_ms - now_ms)
        if high < 60_000:
            return "within a minute"
        return f"in about {_span(low, high)}"

    def text(self, now_ms: int) -> str:
        """The whole sentence: "would start in about 20-45 min", "later than estimated (by
        15:28Z); now in about 5-12 min", or why there is no estimate."""
        span = self.span(now_ms)
        if span is None:
            return self.reason
        if self.late:
            return f"later than estimated (by {_clock(self.passed_p90_ms)}); now {span}"
        return f"would start {span}"


# The share of a worker's time the estimator may take: the next run is due 1 / ESTIMATOR_SHARE
# times the last run's duration after that run started, within IRIS_ESTIMATE_MIN_SECONDS and
# IRIS_ESTIMATE_SECONDS. Each run is a handful of whole-cluster decisions: cheap on a small
# cluster (estimated every few seconds), seconds of CPU at 100,000 tasks (every 2 minutes).
ESTIMATOR_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class EstimatorSchedule:
    """When the newest estimator run was made (``last_ms``) and when the next one is due."""

    last_ms: int
    next_ms: int


def next_run_after(last_ms: int, run_ms: int) -> int:
    """When the run after one made at ``last_ms`` that took ``run_ms`` is due (ms)."""
    gap_ms = min(max(run_ms / ESTIMATOR_SHARE, settings.ESTIMATE_MIN_SECONDS * 1000), settings.ESTIMATE_SECONDS * 1000)
    return last_ms + int(gap_ms)


def estimator_schedule() -> EstimatorSchedule | None:
    """The newest run and when the next is due; None before the first run. One query."""
    return _schedule(EstimateWaits.objects.values_list("as_of_ms", "run_ms").first())


def _schedule(row: tuple[int, int] | None) -> EstimatorSchedule | None:
    return None if row is None else EstimatorSchedule(row[0], next_run_after(*row))


def not_estimated(schedule: EstimatorSchedule | None, now_ms: int) -> ShownEstimate:
    """A pending task the estimator has not seen yet: queued since its last run, saying when
    that was and when the next is due (or was: a run in progress, or no estimator running)."""
    if schedule is None:
        return ShownEstimate(None, None, reason="not estimated yet: the estimator has not run yet")
    last, due = _clock_s(schedule.last_ms), _clock_s(schedule.next_ms)
    when = f"the next is due at {due}" if schedule.next_ms >= now_ms else f"the next was due at {due}, not done yet"
    return ShownEstimate(
        None, None, reason=f"not estimated yet: queued since the estimator's last run ({last}; {when})"
    )


def shown_estimates(task_names: Iterable[str], now_ms: int) -> dict[str, ShownEstimate]:
    """How the stored estimates of these tasks read at ``now_ms`` (task name -> estimate; a
    task without a stored row is :func:`not_estimated`). Two queries (the rows, and the newest
    run's time, duration and band waits); one more only when some estimate's p90 has passed
    (the submission of the tasks it passed for)."""
    names = list(dict.fromkeys(task_names))
    if not names:
        return {}
    rows = {e.task: e for e in EstimatedStart.objects.filter(task__in=names)}
    return _shown(names, rows, now_ms)


def shown_estimates_of_job(job: Job, pending: Iterable[str], now_ms: int) -> dict[str, ShownEstimate]:
    """How the estimates of one job's ``pending`` tasks (their names) read at ``now_ms`` (task
    name -> estimate; a task without a stored row is :func:`not_estimated`). Two queries."""
    rows = {e.task: e for e in EstimatedStart.objects.filter(job=job.name)}
    return _shown(list(pending), rows, now_ms, jobs={job.name: (job.submitted_at_ms, job.band)})


def _shown(
    names: list[str], rows: dict[str, EstimatedStart], now_ms: int, jobs: dict[str, tuple[int, int]] | None = None
) -> dict[str, ShownEstimate]:
    passed = [name for name, row in rows.items() if row.p90_ms is not None and row.p90_ms < now_ms]
    # The newest run: when it was and how long it took (what an unseen task says), and the band
    # waits a passed estimate is conditioned on. Read whatever the rows are: a fixed count.
    newest = EstimateWaits.objects.values_list("as_of_ms", "run_ms", "waits").first()
    schedule = _schedule(newest[:2]) if newest else None
    waits: dict[str, list[int]] = dict(newest[2]) if newest else {}
    if passed:
        missing = {name.rsplit("/", 1)[0] for name in passed} - set(jobs or {})
        if missing:
            jobs = {
                **(jobs or {}),
                **{
                    name: (submitted, band)
                    for name, submitted, band in Job.objects.filter(name__in=missing).values_list(
                        "name", "submitted_at_ms", "band"
                    )
                },
            }
    shown = {}
    unseen = not_estimated(schedule, now_ms)
    for name in names:
        row = rows.get(name)
        if row is None:
            shown[name] = unseen
        elif row.p50_ms is None:
            shown[name] = ShownEstimate(None, None, as_of_ms=row.as_of_ms, reason=row.reason)
        elif row.p90_ms >= now_ms:
            shown[name] = ShownEstimate(row.p50_ms, row.p90_ms, row.method, row.as_of_ms)
        else:
            shown[name] = _conditioned(row, (jobs or {}).get(name.rsplit("/", 1)[0]), waits, now_ms)
    return shown


def _conditioned(
    row: EstimatedStart, job: tuple[int, int] | None, waits: dict[str, list[int]], now_ms: int
) -> ShownEstimate:
    """A stored estimate whose p90 passed before its task started, conditioned on the wait."""
    passed = row.p90_ms
    if job is not None:
        submitted, band = job
        span = conditioned_on_wait(waits.get(str(band), ()), submitted, now_ms)
        if span is not None:
            return ShownEstimate(span[0], span[1], METHOD_WAIT_HISTORY, now_ms, passed_p90_ms=passed)
        band_name = Band(band).name
        band_waits = waits.get(str(band), ())
        if len(band_waits) < MIN_SAMPLES:
            why = f"too few recent {band_name} waits are known ({len(band_waits)}) to say more"
        else:
            waited = now_ms - submitted
            longer = sum(1 for w in band_waits if w > waited)
            why = (
                f"its job has waited {_span(waited, waited)} since it was submitted, and only {longer} of the "
                f"{len(band_waits)} recent {band_name} waits were longer"
            )
    else:
        why = "its job is gone"
    return ShownEstimate(
        None,
        None,
        as_of_ms=row.as_of_ms,
        passed_p90_ms=passed,
        reason=f"later than estimated (by {_clock(passed)}), and {why}: no new estimate until the estimator runs again",
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%MZ")


def _clock_s(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%SZ")


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
    else no earlier than the shown estimate of ``task_ahead``, the task just ahead of it in its
    band's queue. Returns ``(estimated_start, text)``, e.g. ``"would start in about 20-45 min"``.
    One query (three when the estimate ahead has passed), whatever the answer."""
    shown = shown_estimates([task_ahead or ""], now_ms)[task_ahead or ""]
    if would_place:
        return None, "would start at the next tick"
    if task_ahead is None:
        return None, "no estimate: nothing is queued ahead of it to measure by, and it does not fit now"
    if shown.p50_ms is None:
        return None, f"no estimate for the task ahead of it ({shown.reason})"
    return shown.data(), shown.text(now_ms) + f" (after {task_ahead}, just ahead of it)"
