"""Log formatting and filtering: JSON lines for log shippers, and chatter demoted to DEBUG.

``IRIS_LOG_FORMAT=json`` makes every record one JSON object on one line. The context fields a
trace needs (``tick``, ``job``, ``task``, ``attempt``, ``worker``, ``actor``, ...) are passed by
the code that logs, as ``log.info(..., extra={"job": name, "actor": user})``, and become
top-level keys; anything else a record carries stays out, so the shape is stable.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timezone

# Keys a record may carry through ``extra=``; they become top-level JSON fields.
CONTEXT_FIELDS = (
    "tick",
    "job",
    "task",
    "attempt",
    "worker",
    "user",
    "actor",
    "action",
    "target",
    "band",
    "assigned",
    "preempted",
    "expired",
    "conflicts",
    "pending",
    "duration_ms",
    "load_ms",
    "decide_ms",
    "apply_ms",
    "refresh",
    "outcome",
    "code",
    "tasks",
    "jobs",
    "status_code",
)


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", <context fields>, "exc"}``, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


# runserver/gunicorn access lines of requests made every few seconds by machines, not people.
# The agents' log shipping (POST agent/logs/) is one request per running attempt every second or
# two: 71% of the demo's log before it was demoted. Reading a log (GET) is a person, and stays.
CHATTY_PATHS = re.compile(
    r'^"?(?:[A-Z]+ /(?:api/v1/agent/(?:heartbeat|report)/|metrics|healthz|readyz)|POST /api/v1/agent/logs/)[/ ?]'
)
# The worker agent's lines per attempt: started, stopped as ordered (a preemption or a cancel,
# which the tick's line counts and the preemption history details) and exited with 0 or with
# 143 (SIGTERM, after such a stop). Routine, dozens a minute under the demo. Any other exit code
# and every warning stay.
AGENT_STARTED = "agent %s: started %s attempt %s (pid %s)"
AGENT_STOPPING = "agent %s: stopping %s attempt %s: %s"
AGENT_EXITED = "agent %s: %s attempt %s exited with %s"
ROUTINE_EXIT_CODES = {0, 143}
# Celery's per-task lines; every task of ours is periodic, so each would print every few seconds.
CELERY_PER_TASK = {"celery.beat", "celery.worker.strategy", "celery.app.trace"}


def is_chatter(record: logging.LogRecord) -> bool:
    """A record that repeats every few seconds under normal operation and tells nothing new."""
    if record.name == "kombu.connection" and record.msg.startswith("No hostname was supplied"):
        return True  # the file-system broker has no host; said on every connection (readiness polls)
    if record.levelno > logging.INFO:
        return False
    if record.name == "django.server":
        status = getattr(record, "status_code", 0) or 0
        first = str(record.args[0]) if isinstance(record.args, tuple) and record.args else record.getMessage()
        return status < 400 and bool(CHATTY_PATHS.match(first))
    if record.name in CELERY_PER_TASK:
        return True
    if record.name == "iris.agent" and isinstance(record.args, tuple):
        if record.msg in (AGENT_STARTED, AGENT_STOPPING):
            return True
        return record.msg == AGENT_EXITED and bool(record.args) and record.args[-1] in ROUTINE_EXIT_CODES
    return False


def is_client_error(record: logging.LogRecord) -> bool:
    """Django's line for a request refused with a 4xx status (PermissionDenied, Http404)."""
    status = getattr(record, "status_code", 0) or 0
    return record.name == "django.request" and 400 <= status < 500


class DemoteChatter(logging.Filter):
    """Handler filter: chatter becomes a DEBUG record, dropped unless the log level is DEBUG.

    The chatter comes from Django's and Celery's own loggers, which cannot be told to log it at
    DEBUG; errors from them (a failed task, a 500) are never chatter.
    """

    def __init__(self, level: str | int = "INFO"):
        super().__init__()
        self.level = logging.getLevelName(level) if isinstance(level, str) else level
        if not isinstance(self.level, int):
            self.level = logging.INFO

    def filter(self, record: logging.LogRecord) -> bool:
        if is_client_error(record):
            # Django logs a refused request (403, 404) with the exception that refused it: one
            # line says all there is, a traceback of an ordinary refusal only alarms the reader.
            record.exc_info, record.exc_text = None, None
        if not is_chatter(record):
            return True
        if self.level > logging.DEBUG:
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True
