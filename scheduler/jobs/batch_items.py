"""A batch's items (``POST jobs:batch``, :func:`scheduler.jobs.submit.submit_jobs`): each body
parsed by the one job-request model, and the one error of a refused batch, naming each item."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings

from scheduler.foundation.errors import InvalidArgument, ResourceExhausted, ServiceError
from scheduler.jobs.request import JobRequest, parse_job_request

# Refused items a batch's error lists (``details.errors``); its code and message are the first's.
MAX_LISTED_ERRORS = 100


def item_error(index: int, exc: ServiceError) -> ServiceError:
    """``exc`` as raised for item ``index`` of a batch: the same code, the message and
    ``details.field`` prefixed with ``jobs[index]`` (``jobs[3].priority: ...``), ``details.index``."""
    prefix = f"jobs[{index}]"
    field = exc.field
    if field and exc.message.startswith(f"{field}:"):
        message = f"{prefix}.{exc.message}"
    else:
        message = f"{prefix}: {exc.message}"
    details = {**exc.details, "index": index, "field": f"{prefix}.{field}" if field else prefix}
    return type(exc)(message, details=details)


def batch_error(refused: Sequence[tuple[int, ServiceError]]) -> ServiceError:
    """The one error of a refused batch: the first refused item's (its code, status and message,
    ``details`` with ``index`` and ``field``), with ``details.errors`` listing every refused item
    (up to MAX_LISTED_ERRORS: ``{index, code, message, field}``) and ``details.refused`` their number."""
    errors = [item_error(i, exc) for i, exc in refused[:MAX_LISTED_ERRORS]]
    first = errors[0]
    first.details["refused"] = len(refused)
    first.details["errors"] = [
        {"index": e.details["index"], "code": e.code, "message": e.message, "field": e.details["field"]} for e in errors
    ]
    return first


def parse_batch(bodies: Any) -> list[JobRequest | ServiceError]:
    """Each body of a batch parsed by the one job-request model, or the error it raised."""
    if not isinstance(bodies, list | tuple) or not bodies:
        raise InvalidArgument("expected a non-empty list of job objects, each as the body of POST jobs/", field="jobs")
    limit = settings.MAX_JOBS_PER_BATCH
    if len(bodies) > limit:
        raise ResourceExhausted(
            f"{len(bodies):,} jobs exceed the limit of {limit:,} per batch (IRIS_MAX_JOBS_PER_BATCH); "
            f"send them in several batches",
            field="jobs",
            details={"limit": limit},
        )
    parsed: list[JobRequest | ServiceError] = []
    for body in bodies:
        try:
            parsed.append(parse_job_request(body))
        except ServiceError as exc:
            parsed.append(exc)
    return parsed
