"""What every console view shares: role gates, full page or fragment, cheap polling, paging.

A role gate raises Django's ``PermissionDenied`` with a sentence saying who may open the page
and who you are; ``templates/403.html`` shows it. Pages render their whole template, and HTMX
requests render the named partial of the same template (django-template-partials).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

from scheduler.foundation import roles
from scheduler.foundation.errors import ServiceError

# Rows per page of long tables (queue band, preemptions, jobs, audit, workers).
PAGE_SIZE = 50
# Seconds between refreshes of live fragments. Ticks run every IRIS_TICK_SECONDS (5 by default);
# polling faster than that only re-reads the same tick.
POLL_SECONDS = 5


def denied(user, page: str, needs: str) -> PermissionDenied:
    return PermissionDenied(
        f"{page} is for {needs}. You are signed in as '{user.username}' ({roles.role_name(user)}). "
        f"Ask an admin to add you to the right group if you need it."
    )


def operator_required(page: str) -> Callable:
    """Operators and admins only; others get the 403 page naming ``page`` and their role."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not roles.is_operator(request.user):
                raise denied(request.user, page, "operators (and admins)")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def admin_required(page: str) -> Callable:
    def decorate(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not roles.is_admin(request.user):
                raise denied(request.user, page, "admins")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def require_POST(view):
    """Like Django's ``require_POST``, but a GET (a bookmarked or typed action URL) gets the
    console's 405 page saying what the URL is for, not an empty response."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            body = render_to_string("405.html", {"method": request.method, "path": request.path}, request=request)
            response = HttpResponse(body, status=405)
            response["Allow"] = "POST"
            return response
        return view(request, *args, **kwargs)

    return wrapped


def page_or_fragment(
    request: HttpRequest, template: str, fragment: str, context: dict, *, status: int = 200
) -> HttpResponse:
    """The full page, or for an HTMX request (not a boosted navigation) the named partial."""
    if request.htmx and not request.htmx.boosted:
        return render(request, f"{template}#{fragment}", context, status=status)
    return render(request, template, context, status=status)


def unchanged(request: HttpRequest, marker) -> bool:
    """A poll that already shows ``marker`` (the newest tick or event) needs no new fragment.

    Pollers send ``since=<marker>``; answering 204 tells htmx to keep what it has, so a quiet
    page costs one indexed query per poll.
    """
    return bool(request.htmx) and marker is not None and request.GET.get("since") == str(marker)


def no_change() -> HttpResponse:
    return HttpResponse(status=204)


def page_number(request: HttpRequest, name: str = "page") -> int:
    try:
        return max(1, int(request.GET.get(name, "1")))
    except ValueError:
        return 1


@dataclass(frozen=True)
class Window:
    """A page of a long list: where it starts, how big it is, and how many there are."""

    number: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def first(self) -> int:
        return self.offset + 1 if self.total else 0

    @property
    def last(self) -> int:
        return min(self.offset + self.size, self.total)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def previous(self) -> int:
        return self.number - 1

    @property
    def next(self) -> int:
        return self.number + 1


def window(request: HttpRequest, total: int, size: int = PAGE_SIZE) -> Window:
    number = page_number(request)
    pages = max(1, -(-total // size))
    return Window(min(number, pages), size, total)


def apply_service_error(form, exc: ServiceError, fields: dict[str, str] | None = None) -> None:
    """Show a service's error on the form field it names (``device.count`` -> ``device_count``)."""
    name = exc.field or ""
    mapped = (fields or {}).get(name) or name.replace(".", "_").split("[")[0]
    message = exc.message
    if mapped and message.startswith(f"{name}: "):
        message = message[len(name) + 2 :]
    if mapped in form.fields:
        form.add_error(mapped, message)
    else:
        form.add_error(None, exc.message)
