"""Post-commit hooks: ask Celery for a task by its name.

The use cases request a prompt tick after a submission and a drain after the tick writes
intents. They do it by task name (``scheduler.tick``, ``scheduler.dispatch``) through the Celery
app, so no use case imports :mod:`scheduler.tasks` (which imports the use cases): the task
names are the interface, and beat runs the same tasks anyway.

A burst of submissions asks for one prompt tick, not one each (:func:`request_once`): a request
is not sent again while the one sent has not started. The flag lives in the cache (Redis when
``IRIS_REDIS_URL`` is set, shared by the web and Celery processes); with the in-process cache of
the embedded default the task cannot clear it, so it lapses with the message's ``expires``.

A request may also ask for a minimum spacing (``min_interval``), counted from the end of the
task's previous run: the task records its start and its end (:func:`task_started`,
:func:`task_ended`), a request made less than that long after the end is sent with a countdown
to the end of the spacing, and a run that starts too soon anyway (it was queued while the
previous run was still going) moves itself to then (:func:`start_or_defer`). The prompt tick
uses it (``IRIS_PROMPT_TICK_MIN_INTERVAL_MS``), so ticks that take longer than the interval no
longer run back to back under a steady stream of submissions: the tick worker rests at least the
interval between two ticks, and a scheduled run (beat's) that finds a request already waiting
leaves the work to it.
"""

from __future__ import annotations

import logging
import time

from celery import current_app
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

# The tick a submission asks for (the task name; beat runs it too).
PROMPT_TICK = "scheduler.tick"


def enqueue(task_name: str, *, expires: float, logger: logging.Logger, failure: str, countdown: float = 0.0) -> bool:
    """Send ``task_name`` to the broker, to start ``countdown`` seconds from now, dropped by the
    worker if not started within ``expires`` seconds of that. Never raises: on any broker failure
    log ``failure`` (with the traceback) on ``logger`` and return False; beat's next run of the
    same task does the work."""
    try:
        if countdown > 0:
            current_app.send_task(task_name, countdown=countdown, expires=countdown + expires, retry=False)
        else:
            current_app.send_task(task_name, expires=expires, retry=False)
    except Exception:  # noqa: BLE001 -- any broker failure; beat runs the task anyway
        logger.warning(failure, exc_info=True)
        return False
    return True


def _requested(task_name: str) -> str:
    return f"iris:requested:{task_name}"


def _started(task_name: str) -> str:
    return f"iris:started:{task_name}"


# Seconds taken off a countdown before this process counts on it: the worker that runs the task
# may read a clock a little behind this one.
COUNTDOWN_MARGIN = 0.05

# task name -> time.time() before which a request this process sent cannot start (it was sent with
# a countdown): until then a caller here is covered without asking the cache.
_not_before: dict[str, float] = {}


def request_once(
    task_name: str, *, expires: float, logger: logging.Logger, failure: str, min_interval: float = 0.0
) -> None:
    """:func:`enqueue` ``task_name`` unless a request of it sent before has not started yet
    (the task calls :func:`task_started` first thing). Whoever calls this after its own writes
    committed is covered either way: the waiting task starts after those writes. With
    ``min_interval`` (seconds), a task that started less than that long ago is requested for
    the end of the interval instead of now. Never raises.

    A request this process sent with a countdown cannot start before the countdown ends, so
    until then (less :data:`COUNTDOWN_MARGIN`) calls in this process return at once, without a
    round trip to the cache: a stream of submissions asks the cache about once per tick and
    process, not once per submission (issue 26)."""
    now = time.time()
    if _not_before.get(task_name, 0.0) > now:
        return
    key = _requested(task_name)
    countdown = 0.0
    try:
        if not _add_flag(key, timeout=max(1, round(min_interval + expires))):
            return
        if min_interval > 0:
            countdown = _rest_left(task_name, min_interval)
    except Exception:  # noqa: BLE001 -- a cache outage must not cost the request
        logger.warning("cache unavailable; requesting %s anyway", task_name, exc_info=True)
    if not enqueue(task_name, expires=expires, logger=logger, failure=failure, countdown=countdown):
        forget_request(task_name)
    elif countdown > COUNTDOWN_MARGIN:
        _not_before[task_name] = now + countdown - COUNTDOWN_MARGIN


# One Redis client per cache backend, for :func:`_add_flag` (see there).
_flag_clients: dict[int, tuple[object, object]] = {}


def _add_flag(key: str, *, timeout: int) -> bool:
    """``cache.add(key, 1, timeout)``, as Django's Redis cache would do it (same key, same stored
    value), with one Redis client kept per process: Django's cache builds a new client object
    per call, and that construction (redis-py fills a table of some 170 reply callbacks) was the
    larger part of a submission's prompt-tick request (issue 26). Other caches: ``cache.add``."""
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        return cache.add(key, 1, timeout=timeout)
    raw = backend._cache  # Django's RedisCacheClient: its pool, the one the cache uses
    held = _flag_clients.get(id(raw))
    if held is None or held[0] is not raw:
        held = _flag_clients[id(raw)] = (raw, raw.get_client(key, write=True))
    # An int is stored as its digits by Django's Redis serializer, so cache.get reads it back.
    return bool(held[1].set(backend.make_and_validate_key(key), 1, nx=True, ex=timeout))


def _ended(task_name: str) -> str:
    return f"iris:ended:{task_name}"


def _rest_left(task_name: str, min_interval: float) -> float:
    """Seconds from now until the end of the rest after ``task_name``'s last run (0 when that is
    past): ``min_interval`` after its end, or the longer rest that run asked for
    (:func:`task_ended`). While a run is going (its start is newer than the last end) the end is
    not known yet: ``min_interval`` after the start stands in for it, so the answer is never later
    than the real moment, and the run that starts too soon moves itself (:func:`start_or_defer`)."""
    marks = cache.get_many([_started(task_name), _ended(task_name)])
    started = marks.get(_started(task_name))
    ended = marks.get(_ended(task_name))
    end_at, rest = (float(ended[0]), max(min_interval, float(ended[1]))) if ended is not None else (None, min_interval)
    if started is not None and (end_at is None or float(started) > end_at):
        last, rest = float(started), min_interval
    elif end_at is not None:
        last = end_at
    else:
        return 0.0
    return max(0.0, min(rest, last + rest - time.time()))


def start_or_defer(
    task_name: str,
    *,
    min_interval: float,
    requested: bool,
    expires: float,
    logger: logging.Logger,
    failure: str,
) -> bool:
    """Called by ``task_name`` first thing, before it reads anything. True: run now (the start
    is recorded and the request forgotten, :func:`task_started`). False: the previous run ended
    less than ``min_interval`` ago, and this run moves to the end of that rest instead:

    - a requested run (:func:`request_once` sent it) is sent again for then; its flag stays held,
      so callers meanwhile are covered by it, as they were by the message it came from;
    - a scheduled run (beat's) leaves the work to a request already waiting (which starts by
      then), or requests the task for then itself.

    Either way the task runs within ``min_interval`` of when it would have, after every write
    committed before this call. Never raises: a failed send forgets the request (the next caller
    sends one again; beat runs the task anyway)."""
    if min_interval > 0:
        try:
            countdown = _rest_left(task_name, min_interval)
        except Exception:  # noqa: BLE001 -- without the records, run now
            log.warning("cache unavailable; %s runs without its rest", task_name, exc_info=True)
            countdown = 0.0
        if countdown > 0:
            if not requested:
                request_once(task_name, expires=expires, logger=logger, failure=failure, min_interval=min_interval)
            elif not enqueue(task_name, expires=expires, logger=logger, failure=failure, countdown=countdown):
                forget_request(task_name)
            return False
    task_started(task_name, keep_seconds=min_interval + 1)
    return True


# task name -> time.time() at which the run going in this process started (for its duration).
_running_since: dict[str, float] = {}


def task_started(task_name: str, *, keep_seconds: float) -> None:
    """Called by ``task_name`` as it starts, before it reads anything: forgets the request (the
    next one sends it again) and records the start for ``min_interval``, for ``keep_seconds``.
    Never raises."""
    now = _running_since[task_name] = time.time()
    try:
        cache.set(_started(task_name), now, timeout=max(1, round(keep_seconds)))
    except Exception:  # noqa: BLE001 -- without the record the next request is simply not delayed
        log.warning("cache unavailable; the start of %s is not recorded", task_name, exc_info=True)
    forget_request(task_name)


def task_ended(task_name: str, *, keep_seconds: float, rest_ratio: float = 0.0, max_rest: float = 0.0) -> None:
    """Called by ``task_name`` as it ends (failed or not): records the end, and the rest the next
    run waits after it (``min_interval`` at least; ``rest_ratio`` times this run's duration, at
    most ``max_rest``, when that is longer), for ``keep_seconds`` past that rest. Never raises."""
    now = time.time()
    took = now - _running_since.pop(task_name, now)
    rest = min(max_rest, rest_ratio * took)
    try:
        cache.set(_ended(task_name), (now, rest), timeout=max(1, round(keep_seconds + rest)))
    except Exception:  # noqa: BLE001 -- without the record the next run is spaced from the start
        log.warning("cache unavailable; the end of %s is not recorded", task_name, exc_info=True)


def forget_request(task_name: str) -> None:
    """Called by ``task_name`` as it starts, before it reads anything: the next request sends
    it again. Never raises."""
    _not_before.pop(task_name, None)
    try:
        cache.delete(_requested(task_name))
    except Exception:  # noqa: BLE001 -- a stale flag lapses on its own
        log.warning("cache unavailable; the request flag of %s lapses on its own", task_name, exc_info=True)
