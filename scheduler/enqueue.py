"""Post-commit hooks: ask Celery for a task by its name.

The use cases request a prompt tick after a submission and a drain after the tick writes
intents. They do it by task name (``scheduler.tick``, ``scheduler.dispatch``) through the Celery
app, so no use case imports :mod:`scheduler.tasks` (which imports the use cases): the task
names are the interface, and beat runs the same tasks anyway.

A burst of submissions asks for one prompt tick, not one each (:func:`request_once`): a request
is not sent again while the one sent has not started. The flag lives in the cache (Redis when
``IRIS_REDIS_URL`` is set, shared by the web and Celery processes); with the in-process cache of
the embedded default the task cannot clear it, so it lapses with the message's ``expires``.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.core.cache import cache

log = logging.getLogger(__name__)

# The tick a submission asks for (the task name; beat runs it too).
PROMPT_TICK = "scheduler.tick"


def enqueue(task_name: str, *, expires: float, logger: logging.Logger, failure: str) -> bool:
    """Send ``task_name`` to the broker, dropped by the worker if not started within ``expires``
    seconds. Never raises: on any broker failure log ``failure`` (with the traceback) on
    ``logger`` and return False; beat's next run of the same task does the work."""
    try:
        current_app.send_task(task_name, expires=expires, retry=False)
    except Exception:  # noqa: BLE001 -- any broker failure; beat runs the task anyway
        logger.warning(failure, exc_info=True)
        return False
    return True


def _requested(task_name: str) -> str:
    return f"iris:requested:{task_name}"


def request_once(task_name: str, *, expires: float, logger: logging.Logger, failure: str) -> None:
    """:func:`enqueue` ``task_name`` unless a request of it sent before has not started yet
    (the task calls :func:`forget_request` first thing). Whoever calls this after its own writes
    committed is covered either way: the waiting task starts after those writes. Never raises."""
    key = _requested(task_name)
    try:
        if not cache.add(key, 1, timeout=max(1, round(expires))):
            return
    except Exception:  # noqa: BLE001 -- a cache outage must not cost the request
        logger.warning("cache unavailable; requesting %s anyway", task_name, exc_info=True)
    if not enqueue(task_name, expires=expires, logger=logger, failure=failure):
        forget_request(task_name)


def forget_request(task_name: str) -> None:
    """Called by ``task_name`` as it starts, before it reads anything: the next request sends
    it again. Never raises."""
    try:
        cache.delete(_requested(task_name))
    except Exception:  # noqa: BLE001 -- a stale flag lapses on its own
        log.warning("cache unavailable; the request flag of %s lapses on its own", task_name, exc_info=True)
