"""Post-commit hooks: ask Celery for a task by its name.

The use cases request a prompt tick after a submission and a drain after the tick writes
intents. They do it by task name (``scheduler.tick``, ``scheduler.dispatch``) through the Celery
app, so no use case imports :mod:`scheduler.tasks` (which imports the use cases): the task
names are the interface, and beat runs the same tasks anyway.
"""

from __future__ import annotations

import logging

from celery import current_app

log = logging.getLogger(__name__)


def enqueue(task_name: str, *, expires: float, logger: logging.Logger, failure: str) -> None:
    """Send ``task_name`` to the broker, dropped by the worker if not started within ``expires``
    seconds. Never raises: on any broker failure log ``failure`` (with the traceback) on
    ``logger`` and return; beat's next run of the same task does the work."""
    try:
        current_app.send_task(task_name, expires=expires, retry=False)
    except Exception:  # noqa: BLE001 -- any broker failure; beat runs the task anyway
        logger.warning(failure, exc_info=True)
