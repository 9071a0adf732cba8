"""Formatting for the console's templates: numbers for people, relative times, badges.

Everything here formats; nothing decides. Loaded with ``{% load console %}``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.contrib.humanize.templatetags.humanize import intcomma
from django.utils import timezone
from django.utils.html import format_html

from scheduler.foundation import roles
from scheduler.core.bands import Band
from scheduler.core.explain import cause_text, downgrade_rule_text, format_cores, format_memory, pending_text

register = template.Library()


def as_datetime(value) -> datetime | None:
    """A datetime, or epoch milliseconds (the scheduler's own clock) as one."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


# Units of a relative time, largest first: a month is 30 days, a year 365 (as timesince counts).
SPAN_UNITS = (
    ("year", 365 * 86400),
    ("month", 30 * 86400),
    ("week", 7 * 86400),
    ("day", 86400),
    ("hour", 3600),
    ("minute", 60),
)


def rounded_span(seconds: float) -> str:
    """``7199`` -> ``2 hours``, ``5400`` -> ``2 hours``, ``4800`` -> ``1 hour``, ``3570`` ->
    ``1 hour``: the largest unit it reaches, rounded to the nearest (timesince truncates, so a
    2-hour grant approved a second ago read "ends in 1 hour")."""
    for i, (unit, length) in enumerate(SPAN_UNITS):
        smaller = SPAN_UNITS[i + 1][1] if i + 1 < len(SPAN_UNITS) else length
        if seconds >= length - smaller / 2:  # it rounds to at least one of this unit
            n = max(1, int(seconds / length + 0.5))
            return f"{n:,} {unit}{'' if n == 1 else 's'}"
    return "1 minute"


def relative(when: datetime, now: datetime | None = None) -> str:
    now = now or timezone.now()
    delta = (now - when).total_seconds()
    if abs(delta) < 5:
        return "just now"
    if abs(delta) < 60:
        text = f"{int(abs(delta))} s"
    else:
        text = rounded_span(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


@register.simple_tag
def when(value, empty: str = "—"):
    """``<time>`` with the relative time as text and the absolute UTC time on hover."""
    moment = as_datetime(value)
    if moment is None:
        return empty
    absolute = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), absolute, relative(moment))


@register.simple_tag
def waited(value):
    """How long since ``value``, without "ago": "4 minutes"; the absolute time on hover."""
    moment = as_datetime(value)
    if moment is None:
        return "—"
    text = relative(moment).removesuffix(" ago")
    absolute = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html('<span title="since {}">{}</span>', absolute, text)


@register.filter
def gib(n_bytes):
    """Bytes for people: ``16 GiB``, ``1.5 GiB``, ``512 MiB``."""
    if n_bytes is None:
        return "—"
    return format_memory(int(n_bytes))


@register.filter
def cores(millicores):
    if millicores is None:
        return "—"
    return format_cores(int(millicores))


@register.filter
def points(n):
    """Budget points with thousands separators; ``None`` as a dash."""
    if n is None:
        return "—"
    return intcomma(int(n))


@register.filter
def limit_text(n):
    """A budget limit: 0 means unlimited."""
    if n is None:
        return "—"
    return "unlimited" if int(n) == 0 else intcomma(int(n))


@register.filter
def band_name(value):
    if value is None or value == "":
        return "—"
    return Band.parse(value).name


@register.simple_tag
def downgrade_rule():
    """The downgrade rule in one sentence (``core.explain.downgrade_rule_text``)."""
    return downgrade_rule_text()


@register.simple_tag
def band_badge(value, title: str = ""):
    if value is None or value == "":
        return "—"
    band = Band.parse(value)
    return format_html(
        '<span class="band band-{}" title="{}">{}</span>', band.wire, title or f"{band.name} band", band.name
    )


@register.simple_tag
def state_badge(state):
    if not state:
        return "—"
    return format_html('<span class="state state-{}">{}</span>', state, state)


@register.simple_tag
def resources(cpu_millicores, memory_bytes, device_type="cpu", variant="", count=0):
    """``2 cores · 8 GiB · 4 × h100 GPU``."""
    parts = [format_cores(int(cpu_millicores or 0)), format_memory(int(memory_bytes or 0))]
    if device_type and device_type != "cpu" and count:
        parts.append(f"{count} × {variant} {device_type.upper()}")
    return " · ".join(parts)


@register.simple_tag
def job_resources(job):
    return resources(job.cpu_millicores, job.memory_bytes, job.device_type, job.device_variant, job.device_count)


@register.simple_tag
def duration_ms(ms):
    if ms is None:
        return "—"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:,.0f} ms"
    return f"{ms / 1000:,.1f} s"


@register.filter
def seconds_text(seconds):
    """``90`` -> ``1 min 30 s``; ``7200`` -> ``2 h``."""
    if seconds is None:
        return "—"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{days} d" if days else "",
        f"{hours} h" if hours else "",
        f"{minutes} min" if minutes else "",
        f"{secs} s" if secs and not days else "",
    ]
    return " ".join(p for p in parts if p) or "0 s"


@register.filter
def percent(value):
    if value is None:
        return "—"
    return f"{value:,.0f}%"


@register.filter
def share(fraction):
    """A fraction of 1 as a percentage to one decimal: ``0.3333`` -> ``33.3%``."""
    if fraction is None:
        return "—"
    return f"{fraction * 100:.1f}%"


@register.simple_tag(takes_context=True)
def console_role(context):
    """The signed-in user's role and what it may do, for the nav and for hiding actions."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"name": "anonymous", "admin": False, "operator": False}
    return {"name": roles.role_name(user), "admin": roles.is_admin(user), "operator": roles.is_operator(user)}


@register.filter
def reason_text(reason) -> str:
    """A pending reason for people, from a queue entry or a served ``pending_reason`` dict,
    through the one renderer (``core.explain.pending_text``)."""
    if reason is None:
        return ""
    if isinstance(reason, dict):
        band = reason.get("band")
        return pending_text(
            reason,
            Band.parse(band) if band else None,
            reason.get("position"),
            reason.get("band_pending"),
            reason.get("tick"),
        )
    return reason.text


@register.filter
def reason_cause(reason) -> str:
    """Only the cause of a pending reason (where the place and the downgrade are shown beside it)."""
    if reason is None:
        return ""
    return cause_text(reason if isinstance(reason, dict) else reason.reason)


@register.filter
def split_pairs(spec: str) -> list[tuple[str, str]]:
    """``"a:A,b:B"`` -> ``[("a", "A"), ("b", "B")]``: small fixed option lists in templates."""
    return [tuple(item.split(":", 1)) for item in spec.split(",")]


@register.simple_tag(takes_context=True)
def sort_header(context, column: str, label: str, current: str):
    """A sortable column's header: a link (with its HTMX twin) that sorts by ``column``, and
    descending when it already sorts ascending; the current sort is marked with an arrow."""
    request = context["request"]
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("cursor", None)  # a cursor belongs to its sort
    query.pop("since", None)  # a poll's marker: a new sort is a new view, not a poll
    ascending = current == column
    query["sort"] = f"-{column}" if ascending else column
    href = f"{request.path}?{query.urlencode()}"
    arrow = " ▲" if ascending else " ▼" if current == f"-{column}" else ""
    state = "ascending" if ascending else "descending" if arrow else "none"
    return format_html(
        '<th aria-sort="{}"><a href="{}" hx-get="{}" hx-target="#jobs" hx-swap="outerHTML" hx-push-url="true" '
        'data-sort="{}">{}{}</a></th>',
        state,
        href,
        href,
        column,
        label,
        arrow,
    )
