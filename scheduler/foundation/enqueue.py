"""Post-commit hooks: ask Celery for a task by its name.

The use cases request a prompt tick after a submission and a drain after the tick writes
intents. They do it by task name (``scheduler.tick``, ``scheduler.dispatch``) through the Celery
app, so no use case imports :mod:`scheduler.tasks` (which imports the use cases): the task
names are the interface, and beat runs the same tasks anyway.

A burst of submissions asks for one prompt tick, not one each (:func:`request_once`): a request
is not sent again while the one sent has not started. The flag lives in the cache (Redis when
``IRIS_REDIS_URL`` is set, shared by the web and Celery processes); with the in-process cache of
the embedded default the task cannot clear it, so it lapses with the message's ``expires``.

A request may also ask for a minimum spacing (``min_interval``): a task started less than that
long ago (the task records its start, :func:`task_started`) is sent with a countdown to the end
of the spacing, not at once. The prompt tick uses it (``IRIS_PROMPT_TICK_MIN_INTERVAL_MS``), so a
steady stream of submissions costs at most one tick per interval, not one per finished tick.
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
            last = cache.get(_started(task_name))
            if last is not None:
                countdown = max(0.0, min(min_interval, float(last) + min_interval - time.time()))
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


def task_started(task_name: str, *, keep_seconds: float) -> None:
    """Called by ``task_name`` as it starts, before it reads anything: forgets the request (the
    next one sends it again) and records the start for ``min_interval``, for ``keep_seconds``.
    Never raises."""
    try:
        cache.set(_started(task_name), time.time(), timeout=max(1, round(keep_seconds)))
    except Exception:  # noqa: BLE001 -- without the record the next request is simply not delayed
        log.warning("cache unavailable; the start of %s is not recorded", task_name, exc_info=True)
    forget_request(task_name)


def forget_request(task_name: str) -> None:
    """Called by ``task_name`` as it starts, before it reads anything: the next request sends
    it again. Never raises."""
    _not_before.pop(task_name, None)
    try:
        cache.delete(_requested(task_name))
    except Exception:  # noqa: BLE001 -- a stale flag lapses on its own
        log.warning("cache unavailable; the request flag of %s lapses on its own", task_name, exc_info=True)
