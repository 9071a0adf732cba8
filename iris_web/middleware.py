"""Console-only middleware: skipped for token-authenticated API calls; and, first of all, the
router of ordinary submissions to the lean route (:class:`LeanSubmissionMiddleware`).

Sessions, authentication, messages, HTMX and the Content Security Policy serve the
browser console. A request to ``/api/`` that carries ``Authorization: Token ...`` is decided by
knox alone: DRF tries token authentication first, and with that header it either authenticates
(setting ``request.user``) or answers 401, never falling back to the session. API views are
CSRF-exempt anyway (DRF checks CSRF only for session-authenticated calls), send JSON, not pages,
and use no session, message or HTMX state. So that middleware did nothing useful for a token
call, and on the submission path it was a measurable share of the CPU (docs/benchmarks.md).

Each class below is a subclass of the named middleware, unchanged for every other request: the
console, the admin, and API calls made with the console's session cookie (for which the session
is loaded and DRF's SessionAuthentication still enforces CSRF on writes). Only the hooks the wrapped
middleware defines are forwarded, so Django's handler sees the same hooks as before.
django-axes' middleware stays as it is: it only turns a lockout flag set by a login into its
response, costs nothing, and its system check looks for it by name. Django's CSRF middleware
stays too: API views are CSRF-exempt, so it does next to nothing there, and `check --deploy`
looks for it by name.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.utils.module_loading import import_string

# knox's header prefix, compared as knox compares it: case-insensitively.
TOKEN_PREFIX = settings.REST_KNOX.get("AUTH_HEADER_PREFIX", "Token").lower().encode()


def is_token_api_call(request) -> bool:
    """An ``/api/`` request whose Authorization header knox would take (``Token <key>``)."""
    if not request.path_info.startswith("/api/"):
        return False
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if isinstance(header, str):
        header = header.encode("iso-8859-1", "replace")
    parts = header.split()
    return bool(parts) and parts[0].lower() == TOKEN_PREFIX


def console_only(middleware_class: type) -> type:
    """A subclass of ``middleware_class`` (so Django's and the admin's checks still find it)
    that passes token-authenticated API calls straight on. Under ASGI it is the class itself."""

    def __call__(self, request):
        if is_token_api_call(request) and not iscoroutinefunction(self.get_response):
            request.iris_token_api_call = True
            return self.get_response(request)
        return middleware_class.__call__(self, request)

    namespace = {
        "__call__": __call__,
        "__module__": __name__,
        "__doc__": f"{middleware_class.__module__}.{middleware_class.__name__}, skipped for token API calls.",
    }
    for hook in ("process_view", "process_exception", "process_template_response"):
        if hasattr(middleware_class, hook):
            namespace[hook] = _forwarded(middleware_class, hook)
    return type(f"ConsoleOnly{middleware_class.__name__}", (middleware_class,), namespace)


def _forwarded(middleware_class: type, hook: str):
    original = getattr(middleware_class, hook)

    def forward(self, request, *args, **kwargs):
        if getattr(request, "iris_token_api_call", False):
            return None
        return original(self, request, *args, **kwargs)

    forward.__name__ = hook
    return forward


SessionMiddleware = console_only(SessionMiddleware)
AuthenticationMiddleware = console_only(AuthenticationMiddleware)
MessageMiddleware = console_only(MessageMiddleware)
HtmxMiddleware = console_only(import_string("django_htmx.middleware.HtmxMiddleware"))


class CSPMiddleware(console_only(import_string("csp.middleware.CSPMiddleware"))):
    """The Content Security Policy, skipped for token API calls that answer JSON: a token call
    answered with an HTML page (the browsable API, for ``Accept: text/html``) gets it too."""

    def __call__(self, request):
        response = super().__call__(request)
        if getattr(request, "iris_token_api_call", False) and response.get("Content-Type", "").startswith("text/html"):
            response = self.process_response(request, response)
        return response


# The middleware of MIDDLEWARE that does nothing for a request the lean submission route takes
# (``scheduler.api.lean.takes``: a token, no cookie, a JSON body and answer), and why.
NOTHING_FOR_LEAN_SUBMISSIONS = {
    # Answers paths of static files only; the jobs path is none.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Console-only (above): they pass a token API call straight on.
    "iris_web.middleware.SessionMiddleware",
    "iris_web.middleware.AuthenticationMiddleware",
    "iris_web.middleware.MessageMiddleware",
    "iris_web.middleware.HtmxMiddleware",
    "iris_web.middleware.CSPMiddleware",  # and the answer is always JSON
    # DRF's views are CSRF-exempt, and without a cookie there is no CSRF cookie to read or renew.
    "django.middleware.csrf.CsrfViewMiddleware",
    # Acts only on the lockout flag a login attempt sets.
    "axes.middleware.AxesMiddleware",
}


class LeanSubmissionMiddleware:
    """First in MIDDLEWARE: an ordinary ``POST /api/v1/jobs/`` (``scheduler.api.lean``) goes to
    the lean route through the rest of MIDDLEWARE less the entries of
    :data:`NOTHING_FOR_LEAN_SUBMISSIONS` (so SecurityMiddleware's, CommonMiddleware's and
    XFrameOptionsMiddleware's checks and headers are the same), every other request through all
    of it as before. A middleware added to MIDDLEWARE that this does not know turns the lean
    route off (every request takes the whole way) rather than being skipped."""

    def __init__(self, get_response):
        from django.core.handlers.exception import convert_exception_to_response

        from scheduler.api import lean

        self.get_response = get_response
        self.lean = None
        ours = f"{__name__}.{type(self).__name__}"
        stack = list(settings.MIDDLEWARE)
        rest = stack[1:] if stack[:1] == [ours] else None
        if rest is None or ours in rest or iscoroutinefunction(get_response):
            return
        kept = [path for path in rest if path not in NOTHING_FOR_LEAN_SUBMISSIONS]
        if not set(kept) <= LEAN_SUBMISSIONS_KEEP:
            return
        handler = convert_exception_to_response(lean.submit)
        for path in reversed(kept):
            handler = convert_exception_to_response(import_string(path)(handler))
        self.lean, self.path, self.takes = handler, lean.PATH, lean.takes

    def __call__(self, request):
        if (
            self.lean is not None
            and request.method == "POST"
            and request.path_info == self.path
            and self.takes(request.META)
        ):
            return self.lean(request)
        return self.get_response(request)


# The middleware the lean route runs as every request does (its checks and its headers).
LEAN_SUBMISSIONS_KEEP = {
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
}
