"""Console-only middleware: skipped for token-authenticated API calls.

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
