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
A request sent with a countdown cannot start before the countdown ends, so until then every
caller is covered without asking: the sender writes that moment into the flag, and a process
that finds the flag held reads it with the same round trip and asks no more until then.
"""

from __future__ import annotations

import logging
import time

from celery import current_app
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ResponseError

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

    A request sent with a countdown cannot start before the countdown ends, so until then (less
    :data:`COUNTDOWN_MARGIN`) calls return at once, without a round trip to the cache: in the
    process that sent it, and (on Redis) in every process that finds the flag held, which tells
    that moment (:func:`_mark_flag`). A stream of submissions asks the cache about once per tick
    and process while ticks are spaced by ``min_interval``, not once per submission (issue 26)."""
    now = time.time()
    if _not_before.get(task_name, 0.0) > now:
        return
    key = _requested(task_name)
    countdown = 0.0
    flagged = False
    try:
        added, not_before = _add_flag(key, timeout=max(1, round(min_interval + expires)))
        if not added:
            # Held: a request was sent and has not started. When it was sent with a countdown,
            # the flag says when it can start; until then this process need not ask again.
            if not_before is not None and not_before - COUNTDOWN_MARGIN > now:
                _not_before[task_name] = not_before - COUNTDOWN_MARGIN
            return
        flagged = True
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
        if flagged:
            _mark_flag(key, now + countdown)


# One Redis client per cache backend, and its flag script, for :func:`_add_flag` (see there).
_flag_clients: dict[int, tuple[object, object, object]] = {}

# SET NX that answers, when the key is held, with its value (in one round trip, on any Redis
# version: SET's NX and GET together need Redis 7, and the embedded broker is 6.2).
_TAKE_FLAG = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return false
"""


# Set once a server refused the flag's script (see _add_flag).
_scripts_refused: list[bool] = []


def _flag_client(backend):
    """This process's Redis client of the cache backend ``backend`` and its flag script."""
    raw = backend._cache  # Django's RedisCacheClient: its pool, the one the cache uses
    held = _flag_clients.get(id(raw))
    if held is None or held[0] is not raw:
        client = raw.get_client(None, write=True)
        held = _flag_clients[id(raw)] = (raw, client, client.register_script(_TAKE_FLAG))
    return held[1], held[2]


def _add_flag(key: str, *, timeout: int) -> tuple[bool, float | None]:
    """``cache.add(key, 1, timeout)``, as Django's Redis cache would do it (same key, same stored
    value), with one Redis client kept per process: Django's cache builds a new client object
    per call, and that construction (redis-py fills a table of some 170 reply callbacks) was the
    larger part of a submission's prompt-tick request (issue 26). Returns whether the flag was
    added and, when it was held, the moment (``time.time()`` seconds) before which the request
    that holds it cannot start, if its sender wrote one (:func:`_mark_flag`), else None. Other
    caches: ``cache.add`` (and no moment: one process has them)."""
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        return cache.add(key, 1, timeout=timeout), None
    client, take = _flag_client(backend)
    name = backend.make_and_validate_key(key)
    # An int is stored as its digits by Django's Redis serializer, so cache.get reads it back.
    if _scripts_refused:
        return bool(client.set(name, 1, nx=True, ex=timeout)), None
    try:
        held = take(keys=[name], args=[1, timeout])
    except ResponseError:
        # A server that refuses scripts (an ACL without EVAL, a managed Redis): the plain SET NX,
        # without the moment, from now on in this process.
        _scripts_refused.append(True)
        log.warning("Redis refused the prompt-tick flag's script; using SET NX", exc_info=True)
        return bool(client.set(name, 1, nx=True, ex=timeout)), None
    if held is None:
        return True, None
    try:
        stamp = int(held)
    except ValueError:
        return False, None
    return False, (stamp / 1000 if stamp > 1 else None)


def _mark_flag(key: str, not_before: float) -> None:
    """Write into the flag this process holds the moment before which the request it sent cannot
    start (milliseconds, as digits), keeping its expiry; nothing if the flag is gone (the task
    started and cleared it). Should the task have started and another process flagged a new
    request in between, that flag gets this moment, which has then passed (the task started
    after it): a reader finds nothing to wait for, and asks as before. Never raises."""
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        return
    try:
        client, _ = _flag_client(backend)
        client.set(backend.make_and_validate_key(key), int(not_before * 1000), xx=True, keepttl=True)
    except Exception:  # noqa: BLE001 -- without the moment, other processes ask as before
        log.warning("cache unavailable; the request's start is not recorded", exc_info=True)


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
