"""The prompt tick: the tick a submission asks for after its commit, and the tick task's first
and last steps that space ticks (``scheduler.foundation.enqueue`` holds the mechanism;
docs/architecture.md, "Prompt ticks are spaced")."""

from __future__ import annotations

import logging

from django.conf import settings

from scheduler.foundation.enqueue import PROMPT_TICK, request_once, start_or_defer, task_ended

log = logging.getLogger(__name__)

_PROMPT_TICK_FAILURE = "could not enqueue a prompt tick; the next scheduled tick will place the job"


def request_prompt_tick() -> None:
    """Ask Celery for a tick now, unless one already asked for has not started yet (it will
    see this job: this runs after commit, and a tick forgets the request before it reads the
    cluster). The tick starts at least IRIS_PROMPT_TICK_MIN_INTERVAL_MS after the previous one
    ended. Never raises (the broker may be down, and beat's next tick picks the job up)."""
    request_once(
        PROMPT_TICK,
        expires=float(settings.TICK_SECONDS),
        min_interval=settings.PROMPT_TICK_MIN_INTERVAL_MS / 1000,
        logger=log,
        failure=_PROMPT_TICK_FAILURE,
    )


def start_prompt_tick(*, scheduled: bool) -> bool:
    """The tick task's first step: True to tick now; False when the previous tick ended less
    than IRIS_PROMPT_TICK_MIN_INTERVAL_MS ago and this one moved to the end of that rest (a
    ``scheduled`` one, beat's, left to a prompt tick already waiting). Never raises."""
    return start_or_defer(
        PROMPT_TICK,
        min_interval=settings.PROMPT_TICK_MIN_INTERVAL_MS / 1000,
        requested=not scheduled,
        expires=float(settings.TICK_SECONDS),
        logger=log,
        failure=_PROMPT_TICK_FAILURE,
    )


def end_prompt_tick() -> None:
    """The tick task's last step (failed or not): the next tick rests from now, for
    IRIS_PROMPT_TICK_MIN_INTERVAL_MS, or IRIS_PROMPT_TICK_REST_RATIO times this tick's duration
    when that is longer (at most IRIS_TICK_SECONDS)."""
    task_ended(
        PROMPT_TICK,
        keep_seconds=settings.PROMPT_TICK_MIN_INTERVAL_MS / 1000 + 1,
        rest_ratio=settings.PROMPT_TICK_REST_RATIO,
        max_rest=float(settings.TICK_SECONDS),
    )
