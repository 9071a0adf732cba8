"""Errors with stable codes, and the one place that turns any error into the API's JSON shape.

Services raise a :class:`ServiceError` subclass; its ``code`` is part of the API contract (the CLI
and scripts match on it), its HTTP status follows from the code. Every error an API request can
meet -- a service error, a DRF or Django exception, a database error, an unexpected bug -- leaves
as ``{"code": ..., "message": ..., "details": {...}}``; no request gets an HTML error page.

=======================  ======  =================================================================
code                     status  meaning
=======================  ======  =================================================================
INVALID_ARGUMENT         400     the request is malformed; ``details.field`` names the field
UNAUTHENTICATED          401     no or bad credentials
PERMISSION_DENIED        403     authenticated, but the role or the budget does not allow it
NOT_FOUND                404     no such job, grant, worker, user or page
FAILED_PRECONDITION      409     the target is in the wrong state (job finished, grant decided)
RESOURCE_EXHAUSTED       429     a limit that frees up (active tasks per user, throttling): retry later
RESOURCE_EXHAUSTED       422     a limit the request itself exceeds (replicas per job): do not retry
INTERNAL                 500     a bug; logged with its traceback, the message says no more
=======================  ======  =================================================================

Protocol errors that carry no business meaning (a wrong HTTP method, an unacceptable ``Accept``
header, a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, an unsupported content type) keep their
HTTP status (405/406/413/415) with the code INVALID_ARGUMENT.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """Base of every error a service raises on purpose. Subclasses fix ``code`` and ``status``."""

    code = "INTERNAL"
    status = 500

    def __init__(self, message: str, *, field: str | None = None, details: Mapping[str, Any] | None = None):
        # A message about one field names it, so a person sees which one at a glance.
        if field is not None and field not in message:
            message = f"{field}: {message}"
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        if field is not None:
            self.details.setdefault("field", field)

    @property
    def field(self) -> str | None:
        return self.details.get("field")

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidArgument(ServiceError):
    code, status = "INVALID_ARGUMENT", 400

    def __init__(self, message: str, *, field: str | None = None, details: Mapping[str, Any] | None = None):
        # Validation messages always start with the field ("replicas: must be at least 1").
        if field is not None and not message.startswith(f"{field}:"):
            message = f"{field}: {message}"
        super().__init__(message, field=field, details=details)


class Unauthenticated(ServiceError):
    code, status = "UNAUTHENTICATED", 401


class PermissionDenied(ServiceError):
    code, status = "PERMISSION_DENIED", 403


class NotFound(ServiceError):
    code, status = "NOT_FOUND", 404


class FailedPrecondition(ServiceError):
    code, status = "FAILED_PRECONDITION", 409


class ResourceExhausted(ServiceError):
    """A limit that frees up with time (unfinished tasks per user, throttling): 429, the status
    clients retry on later."""

    code, status = "RESOURCE_EXHAUSTED", 429


class OverLimit(ResourceExhausted):
    """A limit the request itself exceeds whatever happens meanwhile (more replicas than a job
    may have): the same code, but 422, so no client retries a request that cannot succeed."""

    status = 422


class InternalError(ServiceError):
    code, status = "INTERNAL", 500


def error_body(code: str, message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "details": dict(details or {})}


# --- DRF and Django exceptions -> ServiceError -----------------------------------------------------


def flatten_validation_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"device.count": ["..."], "constraints[0].op": [...]}``."""
    result: dict[str, list[str]] = {}
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            name = str(key) if key != "non_field_errors" else ""
            path = f"{prefix}.{name}" if prefix and name else (prefix or name)
            for sub, messages in flatten_validation_errors(value, path).items():
                result.setdefault(sub, []).extend(messages)
    elif isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            result.setdefault(prefix, []).extend(str(item) for item in detail)
        else:
            for i, item in enumerate(detail):
                for sub, messages in flatten_validation_errors(item, f"{prefix}[{i}]").items():
                    result.setdefault(sub, []).extend(messages)
    else:
        result.setdefault(prefix, []).append(str(detail))
    return {k: v for k, v in result.items() if v}


def from_validation_detail(detail: Any) -> InvalidArgument:
    fields = flatten_validation_errors(detail)
    if not fields:
        return InvalidArgument("invalid request")
    first_field, messages = next(iter(fields.items()))
    message = f"{first_field}: {messages[0]}" if first_field else messages[0]
    details: dict[str, Any] = {"fields": fields}
    if first_field:
        details["field"] = first_field
    return InvalidArgument(message, details=details)


def as_service_error(exc: BaseException) -> ServiceError:
    """Map any exception to the service error it means. Unknown exceptions are INTERNAL."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, drf.ValidationError):
        return from_validation_detail(exc.detail)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return from_validation_detail(detail)
    if isinstance(exc, RequestDataTooBig):
        error = InvalidArgument(
            f"request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes",
            details={"limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
        )
        error.status = 413
        return error
    if isinstance(exc, drf.ParseError):
        return InvalidArgument(f"malformed request body: {exc.detail}")
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return Unauthenticated(str(exc.detail))
    if isinstance(exc, drf.PermissionDenied | DjangoPermissionDenied):
        detail = getattr(exc, "detail", None) or str(exc) or "permission denied"
        return PermissionDenied(str(detail))
    if isinstance(exc, drf.NotFound | Http404):
        return NotFound(str(getattr(exc, "detail", None) or exc or "not found"))
    if isinstance(exc, drf.Throttled):
        details = {"retry_after_seconds": exc.wait} if exc.wait is not None else {}
        return ResourceExhausted(str(exc.detail), details=details)
    if isinstance(exc, drf.MethodNotAllowed | drf.NotAcceptable | drf.UnsupportedMediaType):
        error = InvalidArgument(str(exc.detail))
        error.status = exc.status_code  # keep HTTP semantics (405/406/415); the code stays stable
        return error
    if isinstance(exc, drf.APIException):
        # Any other DRF exception: keep its status, pick the code of that status family.
        code_for_status = {
            400: InvalidArgument,
            401: Unauthenticated,
            403: PermissionDenied,
            404: NotFound,
            409: FailedPrecondition,
            429: ResourceExhausted,
        }
        cls = code_for_status.get(exc.status_code, InternalError)
        return cls(str(exc.detail))
    if isinstance(exc, DataError):
        # A value the database cannot store (out of range, bad encoding) that validation missed.
        return InvalidArgument("a value in the request is out of range or malformed")
    return InternalError("internal error; the server logged the details")


def api_exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception becomes the JSON error shape, never HTML."""
    error = as_service_error(exc)
    if isinstance(error, InternalError) or isinstance(exc, DataError):
        view = context.get("view")
        log.error("unhandled error in %s", type(view).__name__ if view else "API view", exc_info=exc)
    set_rollback()
    headers = {}
    if isinstance(exc, drf.APIException):
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        wait = getattr(exc, "wait", None)
        if wait is not None:
            headers["Retry-After"] = str(int(wait))
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed) and "WWW-Authenticate" not in headers:
        headers["WWW-Authenticate"] = 'Token realm="api"'
    return Response(error.as_json(), status=error.status, headers=headers)


# --- Django-level handlers for paths no DRF view answers ------------------------------------------


def is_api_path(request) -> bool:
    return request.path.startswith("/api/")


def handler404(request, exception=None):
    """JSON for unknown /api/ paths; the console's page everywhere else, saying what was not
    found: a view's own message ("no job named …"), else that no page has this address (Django
    would show a message-less 404's class name, e.g. "Resolver404" for an address no route
    matches)."""
    if is_api_path(request):
        return JsonResponse(error_body(NotFound.code, f"no API endpoint at {request.path}"), status=404)
    from django.http import Http404
    from django.views.defaults import page_not_found

    message = exception.args[0] if exception is not None and exception.args else None
    if not (isinstance(message, str) and message):
        exception = Http404(f"There is no page at {request.path}.")
    return page_not_found(request, exception)


def handler500(request):
    """JSON for /api/ paths (should never happen: the DRF handler catches view errors)."""
    if is_api_path(request):
        return JsonResponse(error_body(InternalError.code, "internal error; the server logged the details"), status=500)
    from django.views.defaults import server_error

    return server_error(request)
