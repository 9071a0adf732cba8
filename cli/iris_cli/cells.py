"""Cells and layouts of the CLI's tables: one value as people read it (bands, times, sizes,
resources), and tables, field lists and page footers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from iris_cli import units

Column = tuple[str, Callable[[dict], Any]]


# --- cells ----------------------------------------------------------------------------------------


def pick(obj: Any, *keys: str, default: Any = None) -> Any:
    """The first present, non-null value among ``keys`` (dotted paths allowed)."""
    if not isinstance(obj, dict):
        return default
    for key in keys:
        value: Any = obj
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            return value
    return default


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``): what other
    users wrote (a job's command, its name) cannot move the cursor, recolour or retitle the
    terminal it is shown on, nor fake a line of the output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return text_of(value)
    return str(value)


def text_of(value: Any) -> str:
    """A reason or explanation the server may send as a string or as ``{"text": ...}``."""
    if isinstance(value, dict):
        for key in ("text", "message", "reason", "summary"):
            if isinstance(value.get(key), str):
                return value[key]
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    return cell(value)


def band(value: Any) -> str:
    return value.upper() if isinstance(value, str) else cell(value)


def when(value: Any) -> str:
    """ISO timestamps shortened to the second: ``2026-05-01 12:00:03Z``."""
    if not isinstance(value, str) or "T" not in value:
        return cell(value)
    date, _, time = value.partition("T")
    zone = "Z" if value.endswith(("Z", "+00:00")) else ""
    return f"{date} {time[:8]}{zone}"


def size(value: Any) -> str:
    """Bytes as the console shows them, in the unit they were likely typed in: ``16 GiB`` for
    16Gi, ``8 GB`` for 8G (``iris_cli.units``, as the console); strings the server formatted are kept."""
    if not isinstance(value, int) or isinstance(value, bool):
        return cell(value)
    return units.format_memory(value)


def requirement(r: dict) -> str:
    """One row of "can it ever run?" as the console words it: ``1 core per task``, ``16 GiB per
    task``; the server sends cores in millicores and memory in bytes."""
    kind, need = pick(r, "kind"), pick(r, "need")
    if kind in ("cpu", "memory") and isinstance(need, int | float) and not isinstance(need, bool):
        amount = units.format_cores(int(need)) if kind == "cpu" else units.format_memory(int(need))
        return f"{amount} per task"
    return cell(pick(r, "label"))


def seconds(value: Any) -> str:
    """A duration in seconds as ``2h``, ``1h30m``, ``45s``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return cell(value)
    remaining = int(value)
    parts = []
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if remaining >= length:
            parts.append(f"{remaining // length}{unit}")
            remaining %= length
    return "".join(parts) or "0s"


def limit(value: Any) -> str:
    return "unlimited" if value == 0 else cell(value)


def points(value: Any) -> str:
    """Budget points as the console shows them: ``16,112``."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else cell(value)


def device(job: dict) -> str:
    dev = pick(job, "device", "resources.device")
    if isinstance(dev, dict):
        kind = dev.get("type") or "cpu"
        if kind == "cpu":
            return ""
        return f"{kind} {dev.get('variant') or 'any'} x{dev.get('count') if dev.get('count') is not None else '?'}"
    kind = pick(job, "device_type")
    if kind and kind != "cpu":
        return f"{kind} {pick(job, 'device_variant', default='any')} x{pick(job, 'device_count', default='?')}"
    return ""


def cpu(job: dict) -> Any:
    cores = pick(job, "cpu", "resources.cpu")
    if cores is None:
        millis = pick(job, "cpu_millicores", "resources.cpu_millicores")
        cores = millis / 1000 if isinstance(millis, int | float) else None
    return cores


def resources(job: dict) -> str:
    parts = []
    cores = cpu(job)
    if cores:
        parts.append(f"{cell(cores)} cpu")
    memory = pick(job, "memory", "memory_bytes", "resources.memory", "resources.memory_bytes")
    if memory:
        parts.append(size(memory))
    if dev := device(job):
        parts.append(dev)
    return ", ".join(parts) or "-"


def job_id(job: Any) -> str:
    if isinstance(job, str):
        return job
    return cell(pick(job, "id", "job_id", "name"))


# --- layouts --------------------------------------------------------------------------------------


def results(page: Any) -> list[dict]:
    """The rows of a paginated answer (``{"count", "results"}``) or of a plain list."""
    if isinstance(page, dict) and isinstance(page.get("results"), list):
        return page["results"]
    if isinstance(page, list):
        return page
    return []


def table(rows: Sequence[dict], columns: Sequence[Column], empty: str = "(none)") -> str:
    if not rows:
        return empty
    grid = [[header for header, _ in columns]]
    grid += [[printable(cell(getter(row))) for _, getter in columns] for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip() for line in grid
    )


def fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """``label  value`` lines, labels aligned; pairs whose value is None are left out."""
    shown = [
        (label, printable(value if isinstance(value, str) else cell(value)))
        for label, value in pairs
        if value is not None
    ]
    if not shown:
        return ""
    width = max(len(label) for label, _ in shown)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in shown)


def page_footer(page: Any, shown: int) -> str:
    """``12 of 340 shown; next: --page 2`` when the answer is one page of several."""
    if not isinstance(page, dict) or "count" not in page:
        return ""
    total = page.get("count")
    if page.get("count_exact") is False:  # the server stopped counting (jobs: past 10,000)
        total = f"more than {total}"
    if not page.get("next") and not page.get("previous"):
        return f"{total} in all" if total != shown else ""
    cursor = query_value(page.get("next") or "", "cursor")
    if cursor or query_value(page.get("previous") or "", "cursor"):
        # Keyset pages (jobs): the next page is named by its cursor, not by a number.
        return f"{shown} of {total} shown" + (f"; next: --cursor {cursor}" if cursor else "")
    current = _page_number(page)
    hint = f"; next: --page {current + 1}" if page.get("next") else ""
    return f"{shown} of {total} shown (page {current}){hint}"


def query_value(url: str, name: str) -> str | None:
    """One query parameter of a link (``cursor`` of a ``next`` link), or None."""
    from urllib.parse import parse_qs, urlparse

    values = parse_qs(urlparse(url).query).get(name)
    return values[0] if values else None


def _page_number(page: dict) -> int:
    from urllib.parse import parse_qs, urlparse

    if page.get("next"):
        number = parse_qs(urlparse(page["next"]).query).get("page", ["2"])[0]
        return int(number) - 1 if number.isdigit() else 1
    if page.get("previous"):
        number = parse_qs(urlparse(page["previous"]).query).get("page", ["0"])[0]
        return int(number) + 1 if number.isdigit() else 2
    return 1


def with_footer(body: str, page: Any) -> str:
    footer = page_footer(page, len(results(page)))
    return f"{body}\n{footer}" if footer else body
