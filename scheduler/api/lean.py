"""``POST /api/v1/jobs/`` without DRF's request cycle, Django's URL resolver or the middleware
that does nothing for it (issue 26: about a fifth of a submission's web instructions in process,
docs/benchmarks.md, "The lean submission path, third pass").

A submission is the API's hottest call, and most of what a request pays around the use case is
machinery this one request does not need: DRF's request wrapper, content negotiation, parser
and renderer selection and response finalisation, Django's URL resolution, and the eight
middleware layers that do nothing for it (``iris_web.middleware.NOTHING_FOR_LEAN_SUBMISSIONS``).
:func:`takes` picks out the ordinary submission (a ``Token`` header, a non-empty JSON body, a JSON answer wanted, no query
string, no cookies) and :func:`submit` answers it with the pieces DRF would use, in DRF's order:

1. the view's first authentication class (``ApiTokenAuthentication``) on the same header, and
   on failure the same 401 with ``WWW-Authenticate`` (DRF's ``handle_exception``);
2. the body read as DRF reads it for a JSON parser (``request.body``: the upload limit's 413)
   and parsed by the API's own :class:`~scheduler.api.parsers.JSONParser` (the depth limit, the
   same messages), a non-object refused as ``IrisView.body`` refuses it;
3. the same use case, ``submit_job``, and its 201 body ``submitted_job_json``;
4. every error through the API's exception handler (``api_exception_handler``: the same codes,
   messages, statuses, headers and logging), rendered by DRF's ``JSONRenderer`` as DRF renders
   it, with the view's own response headers (``Allow``, ``Vary``) taken from ``JobsView``.

``JobsView``'s permission is "signed in" (met by any token that authenticates) and it has no
throttles; ``tests/api/test_lean_submission.py`` fails if either changes, or if any answer
(status, every header, body) differs from the DRF path's for the golden cases. Anything else
(another content type, ``Accept``, a query string such as ``?format=api``, a cookie, an empty
body, a session instead of a token) goes the whole way through DRF as before. The middleware that
routes here is :class:`iris_web.middleware.LeanSubmissionMiddleware`.
"""

from __future__ import annotations

import io
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer

from scheduler.api.authentication import TokenCheckAhead, forget_owner, remember_owner
from scheduler.api.parsers import JSONParser
from scheduler.api.serializers import submitted_job_json
from scheduler.foundation.errors import InvalidArgument, api_exception_handler
from scheduler.jobs.request import parse_job_request
from scheduler.jobs.submit import submit_job

PATH = "/api/v1/jobs/"
# What the lean route answers for: the API client's and the CLI's ``Accept`` (or none), for which
# DRF's negotiation picks its JSON renderer with the plain ``application/json`` media type.
JSON_ACCEPTS = frozenset({None, "*/*", "application/json"})
_TOKEN_PREFIX = settings.REST_KNOX.get("AUTH_HEADER_PREFIX", "Token").lower().encode()


def takes(meta: dict) -> bool:
    """Whether the request with this WSGI environ is an ordinary submission the lean route
    answers (the path and method are the caller's to check)."""
    if meta.get("CONTENT_TYPE") != "application/json" or meta.get("HTTP_ACCEPT") not in JSON_ACCEPTS:
        return False
    if meta.get("QUERY_STRING") or meta.get("HTTP_COOKIE"):
        return False
    length = meta.get("CONTENT_LENGTH")
    if not (length and length.isdigit() and int(length) > 0):
        return False
    # knox's own test of the header, on its bytes (split at ASCII whitespace only): its first
    # word is the prefix, in any case.
    words = meta.get("HTTP_AUTHORIZATION", "").encode("iso-8859-1", "replace").split(None, 1)
    return bool(words) and words[0].lower() == _TOKEN_PREFIX


@lru_cache(maxsize=1)
def _view():
    """A ``JobsView`` as DRF sets one up for a request: its classes, and the response headers
    DRF adds to every answer of it (``Allow``, ``Vary``)."""
    from scheduler.api.views import JobsView

    view = JobsView()
    view.setup(None)  # Django's: ``head`` from ``get``, which ``Allow`` lists
    headers = dict(view.default_response_headers)
    # DRF's ``finalize_response`` adds ``Vary`` first (patched into the response's), then the rest.
    return view, sorted(headers.items(), key=lambda item: item[0] != "Vary")


def submit(request) -> HttpResponse:
    """The answer DRF's ``JobsView.post`` gives this request (see the module's docstring)."""
    view, _ = _view()
    check = TokenCheckAhead.for_request(request)
    if check is not None:
        answer = _submit_checked_ahead(request, view, check)
        if answer is not None:
            return answer
    authenticator = view.authentication_classes[0]()
    try:
        actor, _token = authenticator.authenticate(request)
        request.user = actor
        parsed = _body(request)
        if not isinstance(parsed, dict):
            raise InvalidArgument("expected a JSON object as the request body")
        if (digest := TokenCheckAhead.digest_of(request)) is not None:
            remember_owner(digest, actor)  # the next submission with this token checks it ahead
        return _answer(submitted_job_json(submit_job(actor, parsed)), 201)
    except Exception as exc:  # noqa: BLE001 -- every error becomes the API's JSON error, as in DRF
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
            exc.auth_header = authenticator.authenticate_header(request)
        error = api_exception_handler(exc, {"view": view, "request": request})
        return _answer(error.data, error.status_code, error.headers.items())


def _body(request):
    """The body as DRF's request parses it with the API's JSON parser."""
    return JSONParser().parse(
        io.BytesIO(request.body), "application/json", {"encoding": request.encoding or settings.DEFAULT_CHARSET}
    )


def _submit_checked_ahead(request, view, check: TokenCheckAhead) -> HttpResponse | None:
    """The answer, with the token checked in the round trip of the submission's lock and rule
    reads (``TokenCheckAhead``); None when the token check did not pass, or anything failed
    before it was made: then the request is answered the ordinary way, token check first, so
    every refusal is the one it was (issue 26, ``submit37``)."""
    try:
        parsed = _body(request)
        if not isinstance(parsed, dict):
            return None
        job = submit_job(check.actor, parse_job_request(parsed), token_check=check)
        request.user = check.actor
        return _answer(submitted_job_json(job), 201)
    except Exception as exc:  # noqa: BLE001 -- every error after the check becomes the API's JSON error
        if not check.verified:
            forget_owner(check.digest)
            return None
        request.user = check.actor
        error = api_exception_handler(exc, {"view": view, "request": request})
        return _answer(error.data, error.status_code, error.headers.items())


def _answer(data: dict, status: int, headers=()) -> HttpResponse:
    """``data`` as DRF's ``Response`` renders it with the JSON renderer, headers in DRF's order."""
    response = HttpResponse(JSONRenderer().render(data), status=status, content_type="application/json")
    for name, value in headers:
        if name != "Content-Type":
            response[name] = value
    for name, value in _view()[1]:
        response[name] = value
    return response
