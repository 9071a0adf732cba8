"""Render API answers for people: aligned tables and ``label  value`` blocks.

Every function takes the decoded JSON exactly as the server sent it and returns text; nothing
here talks to the server. Missing fields render as ``-`` so a newer or older server still
prints something sensible.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


Column = tuple[str, Callable[[dict], Any]]


from iris_cli.cells import (  # noqa: F401 (also read as fmt.<name> by the commands)
    _page_number,
    band,
    cell,
    cpu,
    device,
    fields,
    job_id,
    limit,
    page_footer,
    pick,
    points,
    printable,
    query_value,
    requirement,
    resources,
    results,
    seconds,
    size,
    table,
    text_of,
    when,
    with_footer,
)


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


# --- one renderer per answer ----------------------------------------------------------------------

# How ``iris job list`` shows each kind of column the server declares: a list answer of GET jobs/
# names its columns (``columns``: key, label, short, field, kind; the server's one declaration,
# scheduler/jobs/columns.py), so a column added there shows here without a change of the CLI.
JOB_CELLS: dict[str, Callable[[dict, str], Any]] = {
    "job": lambda j, field: pick(j, field),
    "text": lambda j, field: pick(j, field),
    "band": lambda j, field: band(pick(j, field)),
    "counts": lambda j, field: task_counts(j),
    "resources": lambda j, field: resources(j),
    "time": lambda j, field: when(pick(j, field)),
}

# A server that names no columns (one older than the declaration) gets the table it had.
FALLBACK_JOB_COLUMNS: list[dict] = [
    {"short": "Job", "field": "id", "kind": "job"},
    {"short": "User", "field": "user", "kind": "text"},
    {"short": "Band", "field": "band", "kind": "band"},
    {"short": "Effective", "field": "effective_band", "kind": "band"},
    {"short": "State", "field": "state", "kind": "text"},
    {"short": "Tasks", "field": "task_counts", "kind": "counts"},
    {"short": "Resources", "field": "resources", "kind": "resources"},
    {"short": "Submitted", "field": "created_at", "kind": "time"},
]


def job_columns(page: Any) -> list[Column]:
    """The table's columns as the server declares them (unknown kinds shown as text)."""
    declared = page.get("columns") if isinstance(page, dict) else None
    if not isinstance(declared, list) or not declared:
        declared = FALLBACK_JOB_COLUMNS
    columns: list[Column] = []
    for c in declared:
        render = JOB_CELLS.get(str(c.get("kind")), JOB_CELLS["text"])
        field = str(c.get("field"))
        header = str(c.get("short") or c.get("label") or field).upper()
        columns.append((header, lambda j, render=render, field=field: render(j, field)))
    return columns


def task_counts(job: dict) -> str:
    """``2 running, 2 pending`` from ``{"running": 2, "pending": 2}``; else the replica count."""
    counts = pick(job, "task_counts")
    if isinstance(counts, dict) and counts:
        return ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return cell(pick(job, "replicas"))


TASK_COLUMNS: list[Column] = [
    ("TASK", lambda t: pick(t, "index", "id", "name")),
    ("STATE", lambda t: pick(t, "state")),
    ("BAND", lambda t: band(pick(t, "band", "effective_band"))),
    ("WORKER", lambda t: pick(t, "worker")),
    (
        "ATTEMPTS",
        lambda t: (
            pick(t, "attempt_count", "attempts") if not isinstance(pick(t, "attempts"), list) else len(t["attempts"])
        ),
    ),
    ("PREEMPTED", lambda t: pick(t, "preemption_count")),
    ("FAILURES", lambda t: pick(t, "failure_count")),
]

PREEMPTION_COLUMNS: list[Column] = [
    ("WHEN", lambda p: when(pick(p, "at", "created_at"))),
    ("VICTIM", lambda p: pick(p, "victim")),
    ("RAN AS", lambda p: pick(p, "victim_stamp") or band(pick(p, "victim_band"))),
    ("BY", lambda p: pick(p, "preemptor")),
    ("BY BAND", lambda p: band(pick(p, "preemptor_band"))),
    ("WORKER", lambda p: pick(p, "worker")),
    ("REASON", lambda p: pick(p, "reason")),
]

EXPLAIN_TASK_COLUMNS: list[Column] = [
    ("TASK", lambda t: pick(t, "task", "id")),
    ("STATE", lambda t: pick(t, "state")),
    ("BAND", lambda t: band(pick(t, "band"))),
    ("WORKER", lambda t: pick(t, "worker")),
    ("POS", lambda t: pick(t, "position")),
    ("OF", lambda t: pick(t, "band_pending")),
    ("PENDING REASON", lambda t: reason_cell(t)),
]


def reason_cell(t: dict) -> str | None:
    """A task's pending reason text (rendered by the server); a task that moved since the tick
    is marked, keeping the place the tick gave it."""
    reason = pick(t, "pending_reason", "reason")
    text = text_of(reason) if reason else None
    if pick(t, "changed_since_tick") and text:
        return f"(now {pick(t, 'state')}) {text}"
    return text


def job_list(page: Any) -> str:
    return with_footer(table(results(page), job_columns(page), empty="No jobs."), page)


def job_detail(job: dict) -> str:
    head = fields(
        [
            ("job", job_id(job)),
            ("user", pick(job, "user")),
            ("submitted by", pick(job, "submitted_by")),
            ("parent", pick(job, "parent")),
            ("band", band(pick(job, "band", "priority"))),
            ("state", pick(job, "state")),
            ("replicas", pick(job, "replicas")),
            ("tasks", task_counts(job) if pick(job, "task_counts") else None),
            ("resources", resources(job)),
            ("group by", pick(job, "group_by")),
            ("constraints", _constraints(pick(job, "constraints"))),
            ("command", _command(pick(job, "command"))),
            ("system reason", pick(job, "system_reason") or None),
            ("submitted as", _command(pick(job, "submission_argv"))),
            ("children", pick(job, "children") or None),
            ("submitted", when(pick(job, "submitted_at", "created_at"))),
            ("finished", when(pick(job, "finished_at")) if pick(job, "finished_at") else None),
        ]
    )
    tasks = pick(job, "tasks")
    if isinstance(tasks, list):
        head += "\n\nTasks:\n" + table(tasks, TASK_COLUMNS)
    return head


def _command(command: Any) -> Any:
    if isinstance(command, list):
        import shlex

        return shlex.join(str(c) for c in command) or None
    return command


def _constraints(constraints: Any) -> Any:
    if not isinstance(constraints, list) or not constraints:
        return None
    shown = []
    for c in constraints:
        if not isinstance(c, dict):
            shown.append(cell(c))
            continue
        key, op, value = c.get("key"), c.get("op", "eq"), c.get("value")
        text = {
            "eq": f"{key}={cell(value)}",
            "ne": f"{key}!={cell(value)}",
            "in": f"{key} in ({cell(value)})",
            "exists": f"{key} exists",
        }.get(op, f"{key} {op} {cell(value)}")
        shown.append(text + (" (soft)" if c.get("soft") else ""))
    return "; ".join(shown)


BAND_ORDER = ("system", "production", "interactive", "batch")


def queue_band(data: dict) -> str:
    """The band of the job's front-most queued task (the one ``position`` is about)."""
    queued = [t for t in pick(data, "tasks", default=[]) if isinstance(t, dict) and t.get("position") is not None]
    if not queued:
        return band(pick(data, "effective_band"))
    rank = {name: i for i, name in enumerate(BAND_ORDER)}
    front = min(queued, key=lambda t: (rank.get(t.get("band"), len(rank)), t["position"]))
    return band(front.get("band") or pick(data, "effective_band"))


def explanation(data: dict) -> str:
    downgrade = pick(data, "downgrade")
    effective = band(pick(data, "effective_band"))
    if downgrade:
        effective += f" (downgraded: {text_of(downgrade)})"
    position, length = pick(data, "position"), pick(data, "band_pending", "band_queue_length")
    queue_line = None
    if position is not None:
        # Positions come from the last tick, whose band may differ from the effective band now
        # (spend moved since): name the band the position was counted in.
        tick_id = pick(data, "tick")
        queued = pick(data, "queued_band")
        queue_line = f"{position} of {cell(length)} in the {band(queued) if queued else queue_band(data)} queue" + (
            f" (as of tick {tick_id})" if tick_id is not None else ""
        )
    spend, budget = pick(data, "spend"), pick(data, "limit")
    tick_spend, tick_limit, tick_id = pick(data, "spend_at_tick"), pick(data, "limit_at_tick"), pick(data, "tick")
    ran = pick(data, "ran_as")
    head = fields(
        [
            ("job", job_id(pick(data, "job", default=""))),
            ("requested band", band(pick(data, "requested_band"))),
            # A finished job ran as a band: the band its work would queue in now means nothing.
            ("ran as", band(ran)) if ran else ("effective band", effective),
            ("tasks by band", pick(data, "bands_text") or None),
            (
                "spend / limit",
                f"{points(spend)} / {'unlimited' if budget == 0 else points(budget)} (now)"
                if spend is not None or budget is not None
                else None,
            ),
            (
                "spend at tick",
                f"{points(tick_spend)} / {'unlimited' if tick_limit == 0 else points(tick_limit)} (tick {tick_id})"
                if tick_spend is not None
                else None,
            ),
            ("queue position", queue_line),
            ("pending reason", text_of(pick(data, "pending_reason")) if pick(data, "pending_reason") else None),
            (
                "start estimate",
                estimate_line(data)
                if pick(data, "tasks") and any(pick(t, "state") == "pending" for t in pick(data, "tasks"))
                else None,
            ),
        ]
    )
    parts = [head]
    priority = pick(data, "priority")
    if isinstance(priority, dict):
        parts.append(priority_text(priority))
    feasibility = pick(data, "feasibility")
    if isinstance(feasibility, dict):
        parts.append(feasibility_text(feasibility))
    change = pick(data, "what_would_change")
    if change:
        items = change if isinstance(change, list) else [change]
        parts.append("What would change it:\n" + "\n".join(f"  - {text_of(item)}" for item in items))
    tasks = pick(data, "tasks")
    if isinstance(tasks, list) and tasks:
        parts.append("Tasks:\n" + table(tasks, EXPLAIN_TASK_COLUMNS))
    preemptions = pick(data, "preemptions")
    if isinstance(preemptions, list):
        parts.append("Preemptions suffered:\n" + table(preemptions, PREEMPTION_COLUMNS))
    return "\n\n".join(p for p in parts if p)


VERDICTS = {
    "never": "NEVER, on the cluster as it is: no healthy worker meets every requirement, even idle",
    "scale_group": "not yet: no worker fits, but scale group {scale_group} can create a matching slice",
    "not_now": "not now: {matching_workers} matching worker(s), all full",
    "fits": "yes: matching workers have room",
}
REQUIREMENT_COLUMNS: list[Column] = [
    ("REQUIREMENT", requirement),
    ("WORKERS WITH IT", lambda r: pick(r, "workers_alone")),
    ("AND ALL ABOVE", lambda r: pick(r, "workers_with_previous")),
]


PRIORITY_COLUMNS: list[Column] = [
    ("FACTOR", lambda f: pick(f, "label", "factor")),
    ("VALUE", lambda f: pick(f, "text", "value")),
    ("DETAIL", lambda f: pick(f, "detail")),
]


def priority_text(p: dict) -> str:
    """Like sprio: the factors of the first waiting task's place, in the order they apply, with
    the server's labels and texts (the console shows the same)."""
    head = f"Priority of {pick(p, 'task')}: {pick(p, 'text')}"
    return head + "\n" + table(pick(p, "factors", default=[]), PRIORITY_COLUMNS)


def feasibility_text(f: dict) -> str:
    """ "Can it ever run?": the verdict, each requirement's worker counts, who holds the rest."""
    lines = [
        "Can it ever run? "
        + VERDICTS.get(pick(f, "verdict"), cell(pick(f, "verdict"))).format(
            scale_group=pick(f, "scale_group"), matching_workers=pick(f, "matching_workers")
        )
    ]
    reqs = pick(f, "requirements")
    if isinstance(reqs, list) and reqs:
        lines.append(table(reqs, REQUIREMENT_COLUMNS))
    held = pick(f, "held_by")
    if isinstance(held, list) and held:
        lines.append(
            "Held by (this job may evict them): "
            + ", ".join(f"{h['user']} ({h['tasks']} {band(h['band'])})" for h in held)
        )
    others = pick(f, "held_by_others")
    if isinstance(others, dict) and others.get("tasks"):
        lines.append(
            f"{'Also held' if held else 'Held'} by {others['tasks']} task(s) of {', '.join(others['users'])} "
            f"that this job may not evict: only their finishing frees room."
        )
    return "\n".join(lines)


def estimate_cell(t: dict) -> str:
    """A pending task's estimated start as ``p50-p90`` times (``12:05-12:40Z``), or ``-``."""
    e = pick(t, "estimated_start")
    if not isinstance(e, dict):
        return "-"
    low, high = when(e.get("p50")), when(e.get("p90"))
    late = "late, now " if e.get("late") else ""
    if low[:10] == high[:10]:
        return f"{late}{low[11:16]}-{high[11:16]}Z"
    return f"{late}{low[:16]}-{high[:16]}Z"


def estimate_line(data: dict) -> str | None:
    """The explanation's estimated start: the sentence, the range and method, or why none."""
    e = pick(data, "estimated_start")
    sentence = pick(data, "estimated_start_text")
    if isinstance(e, dict):
        return f"{sentence} (p50 {when(e.get('p50'))}, p90 {when(e.get('p90'))}; by {e.get('method')}, as of {when(e.get('as_of'))})"
    return sentence or pick(data, "estimated_start_reason") or None


QUEUE_COLUMNS: list[Column] = [
    ("POS", lambda t: pick(t, "position", "rank")),
    ("BAND", lambda t: band(pick(t, "effective_band", "band"))),
    ("TASK", lambda t: pick(t, "task", "id", "name")),
    ("USER", lambda t: pick(t, "user")),
    ("REQUESTED", lambda t: band(pick(t, "requested_band"))),
    ("RESOURCES", resources),
    ("OF", lambda t: pick(t, "band_pending")),
    ("ESTIMATED START", estimate_cell),
    # A job that can never run says so first: its place in the queue means nothing.
    ("PENDING REASON", lambda t: f"NEVER: {reason_cell(t) or ''}" if pick(t, "never") else reason_cell(t)),
]


def no_estimate_notes(rows: list) -> list[str]:
    """Why the tasks shown with ``-`` under ESTIMATED START have none: each reason the server
    gave, as it gave it, once, with how many of the shown tasks it covers."""
    reasons: dict[str, int] = {}
    for t in rows:
        if not isinstance(pick(t, "estimated_start"), dict):
            reason = pick(t, "estimated_start_reason") or "no reason given"
            reasons[reason] = reasons.get(reason, 0) + 1
    return [f"No estimate (-) for {n} task(s): {reason}" for reason, n in reasons.items()]


def queue(page: Any) -> str:
    rows = results(page)
    body = with_footer(table(rows, QUEUE_COLUMNS, empty="The queue is empty."), page)
    body = "\n".join([body, *no_estimate_notes(rows)])
    tick_id = pick(page, "tick")
    if tick_id is None:
        return body + "\n(No tick has explained the queue yet: positions appear after the next tick.)"
    counts = pick(page, "band_counts", default={})
    per_band = ", ".join(f"{band(b)} {n}" for b, n in counts.items()) if isinstance(counts, dict) else ""
    head = f"As of tick {tick_id} ({when(pick(page, 'tick_at'))})" + (f": {per_band} pending" if per_band else "")
    return f"{head}\n{body}"


def configured_source(b: dict) -> str:
    """Where the configured budget comes from: ``row`` or ``defaults``."""
    return "row" if pick(b, "has_row") else "defaults"


def budget_source(b: dict) -> str:
    """``row``/``defaults``, plus ``+ uplift`` when an active grant raises the configured values."""
    source = configured_source(b)
    raised = pick(b, "effective_budget_limit") not in (None, pick(b, "budget_limit")) or pick(
        b, "effective_max_band"
    ) not in (None, pick(b, "max_band"))
    return f"{source} + uplift" if raised else source


def effective_limit(b: dict) -> str:
    return limit(pick(b, "effective_budget_limit", "budget_limit", "limit"))


BUDGET_COLUMNS: list[Column] = [
    ("USER", lambda b: pick(b, "user", "user_id")),
    ("SPEND", lambda b: pick(b, "spend")),
    ("LIMIT", effective_limit),
    ("MAX BAND", lambda b: band(pick(b, "effective_max_band", "max_band"))),
    ("INTERACTIVE RUNS AS", lambda b: band(pick(b, "effective_band"))),
    ("SOURCE", budget_source),
]


def spend_as_of(data: dict) -> str | None:
    """A budget's spend with what it is as of: the tick, or summed live (an older server: bare)."""
    spend = pick(data, "spend")
    if spend is None or "spend_tick" not in data:
        return spend
    tick = data.get("spend_tick")
    return (
        f"{points(spend)} (as of tick {tick})" if tick is not None else f"{points(spend)} (summed live: no recent tick)"
    )


def budget(data: dict) -> str:
    configured = f"{limit(pick(data, 'budget_limit'))}, max {band(pick(data, 'max_band'))} ({configured_source(data)})"
    body = fields(
        [
            ("user", pick(data, "user", "user_id")),
            ("spend", spend_as_of(data)),
            ("budget limit", effective_limit(data)),
            ("max band", band(pick(data, "effective_max_band", "max_band"))),
            ("configured", configured if "uplift" in budget_source(data) else None),
            ("over budget", pick(data, "over_budget")),
            ("downgrade", pick(data, "downgrade")),  # the server's sentence (core.explain.Downgrade)
            ("source", budget_source(data)),
        ]
    )
    grants = pick(data, "grants")
    if isinstance(grants, list) and grants:
        body += "\n\nOpen uplifts:\n" + table(grants, UPLIFT_COLUMNS)
    return body


def budget_list(page: Any) -> str:
    return with_footer(
        table(
            results(page),
            BUDGET_COLUMNS,
            empty="No budgets to show: no rows, open uplifts or spend; the defaults apply to everyone.",
        ),
        page,
    )


UPLIFT_COLUMNS: list[Column] = [
    ("ID", lambda g: pick(g, "id")),
    ("USER", lambda g: pick(g, "user", "user_id")),
    ("STATE", lambda g: pick(g, "state")),
    ("MAX BAND", lambda g: band(pick(g, "max_band"))),
    ("LIMIT", lambda g: limit(pick(g, "budget_limit")) if pick(g, "budget_limit") is not None else None),
    ("DURATION", lambda g: seconds(pick(g, "duration_seconds"))),
    ("EXPIRES", lambda g: when(pick(g, "expires_at"))),
    ("REASON", lambda g: pick(g, "reason")),
]


def uplift(grant: dict) -> str:
    return fields(
        [
            ("uplift", pick(grant, "id")),
            ("user", pick(grant, "user", "user_id")),
            ("state", pick(grant, "state")),
            ("max band", band(pick(grant, "max_band")) if pick(grant, "max_band") else None),
            ("budget limit", limit(pick(grant, "budget_limit")) if pick(grant, "budget_limit") is not None else None),
            ("duration", seconds(pick(grant, "duration_seconds"))),
            ("reason", pick(grant, "reason")),
            ("requested by", pick(grant, "requested_by")),
            ("decided by", pick(grant, "decided_by")),
            ("note", pick(grant, "decision_note", "note") or None),
            ("starts", when(pick(grant, "starts_at")) if pick(grant, "starts_at") else None),
            ("expires", when(pick(grant, "expires_at")) if pick(grant, "expires_at") else None),
        ]
    )


def place(band_value: Any, position: Any, count: Any) -> str:
    """``interactive 2/7``: a band and a 1-based position in it of its count."""
    return f"{band(band_value)} {cell(position)}/{cell(count)}"


UPLIFT_MOVE_COLUMNS: list[Column] = [
    ("TASK", lambda m: pick(m, "task")),
    ("BEFORE", lambda m: place(pick(m, "band_before"), pick(m, "position_before"), pick(m, "band_pending_before"))),
    (
        "AFTER",
        lambda m: (
            f"{band(pick(m, 'band_after'))} starts on {cell(pick(m, 'starts_on'))}"
            if pick(m, "starts_on")
            else place(pick(m, "band_after"), pick(m, "position_after"), pick(m, "band_pending_after"))
        ),
    ),
]


def uplift_preview(preview: dict) -> str:
    """What approving a grant would do at the next tick (``POST uplifts/<id>:preview``)."""
    moved = pick(preview, "tasks", default=[]) or []
    preemptible = pick(preview, "preemptible", default={}) or {}
    head = fields(
        [
            ("uplift", pick(preview, "uplift")),
            ("user", pick(preview, "user")),
            ("spend", points(pick(preview, "spend"))),
            ("limit", f"{limit(pick(preview, 'limit_before'))} -> {limit(pick(preview, 'limit_after'))}"),
            ("as of tick", pick(preview, "tick")),
            ("tasks moving", len(moved)),
            ("start at once", pick(preview, "starting")),
            ("unchanged", pick(preview, "unchanged")),
            (
                "may preempt",
                ", ".join(f"{n} {band(b)}" for b, n in preemptible.items()) if preemptible else "nothing new",
            ),
        ]
    )
    body = head + "\n\n" + table(moved, UPLIFT_MOVE_COLUMNS, empty="No queued task changes band.")
    if pick(preview, "at_rest") is False:
        body += "\n\nThe newest tick placed or evicted work: the next tick's numbers may differ for other reasons too."
    return body


def uplift_list(page: Any) -> str:
    return with_footer(table(results(page), UPLIFT_COLUMNS, empty="No uplift grants."), page)


WORKER_COLUMNS: list[Column] = [
    ("WORKER", lambda w: pick(w, "name", "id")),
    ("BACKEND", lambda w: pick(w, "backend")),
    ("HEALTHY", lambda w: pick(w, "healthy")),
    ("DRAINING", lambda w: pick(w, "draining")),
    ("CPU", lambda w: cpu(w)),
    ("MEMORY", lambda w: size(pick(w, "memory", "memory_bytes"))),
    ("DEVICE", lambda w: device(w) or None),
    ("RUNNING", lambda w: pick(w, "running_tasks", "active_tasks", "tasks")),
    ("HEARTBEAT", lambda w: when(pick(w, "last_heartbeat"))),
]


def worker_list(page: Any) -> str:
    return with_footer(table(results(page), WORKER_COLUMNS, empty="No workers registered."), page)


def worker(data: dict) -> str:
    return fields(
        [
            ("worker", pick(data, "name", "id")),
            ("healthy", pick(data, "healthy")),
            ("draining", pick(data, "draining")),
        ]
    )


def tick(data: dict) -> str:
    return (
        fields(
            [
                ("tick", pick(data, "id", "tick_id")),
                ("started", when(pick(data, "started_at")) if pick(data, "started_at") else None),
                (
                    "duration",
                    f"{pick(data, 'duration_ms'):.1f} ms"
                    if isinstance(pick(data, "duration_ms"), int | float)
                    else None,
                ),
                ("pending", pick(data, "pending")),
                ("assigned", pick(data, "assigned")),
                ("preempted", pick(data, "preempted")),
                ("expired", pick(data, "expired")),
                ("skipped", pick(data, "skipped", "skipped_conflicts")),
            ]
        )
        or "Tick run."
    )


def me(data: dict) -> str:
    return fields(
        [
            ("user", pick(data, "username", "user")),
            ("role", pick(data, "role")),
            (
                "max band",
                band(pick(data, "budget.effective_max_band", "budget.max_band"))
                if isinstance(pick(data, "budget"), dict)
                else None,
            ),
            ("budget limit", effective_limit(data["budget"]) if isinstance(pick(data, "budget"), dict) else None),
            ("spend", pick(data, "budget.spend")),
        ]
    )


AUDIT_COLUMNS: list[Column] = [
    ("WHEN", lambda a: when(pick(a, "created_at"))),
    ("ACTOR", lambda a: pick(a, "actor", "actor_name")),
    ("ACTION", lambda a: pick(a, "action")),
    ("TARGET", lambda a: pick(a, "target")),
    ("CHANGE", lambda a: change(pick(a, "before"), pick(a, "after"))),
    ("REASON", lambda a: pick(a, "reason")),
]


def change(before: Any, after: Any) -> str:
    """Only what changed: ``max_band interactive->batch, budget_limit 100->500``."""
    if not isinstance(after, dict):
        return cell(after)
    old = before if isinstance(before, dict) else {}
    parts = [
        f"{key} {_short(old.get(key))}->{_short(value)}" if key in old else f"{key} {_short(value)}"
        for key, value in after.items()
        if (key in old and old[key] != value) or (key not in old and value is not None)
    ]
    return ", ".join(parts) or "(no change)"


def _short(value: Any) -> str:
    if value is None:
        return "none"
    return when(value)[:16] if isinstance(value, str) and "T" in value else cell(value)


def audit_list(page: Any) -> str:
    return with_footer(table(results(page), AUDIT_COLUMNS, empty="No audit entries."), page)


def submitted_jobs(answer: dict) -> str:
    """``iris job submit``: the count, one id per line, then the jobs' warnings (``--json`` for scripts)."""
    jobs = pick(answer, "jobs", default=[]) or []
    lines = [f"Submitted {len(jobs):,} job(s):", *(job_id(job) for job in jobs)]
    for job in jobs:
        lines.extend(f"Warning: {job_id(job)}: {w}" for w in (pick(job, "warnings", default=[]) or []))
    return "\n".join(lines)
