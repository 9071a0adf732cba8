"""Jobs: the list, the detail page with its "why" panel, submit, cancel, and what-if.

The why panel shows ``queries.explain_job`` (the API's explain: same facts, same numbers) and
the round-robin place from the newest tick's queue; this module only phrases them for people.
The live part of the detail page polls until the job has finished, then renders without its
trigger, which stops the polling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from scheduler.foundation import roles
from scheduler.foundation.access import owns_job
from scheduler.budgets.queries import budget_view
from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.types import TERMINAL_JOB_STATES, JobState
from scheduler.foundation.errors import InvalidArgument, ServiceError
from scheduler.jobs import cancel as jobs_cancel
from scheduler.jobs import listing
from scheduler.jobs.columns import JOB_COLUMNS
from scheduler.jobs import queries as jobs_queries
from scheduler.jobs import whatif as jobs_whatif
from scheduler.core.explain import cause_text
from scheduler.jobs.explain import NOT_YET_TICKED, explain_job
from scheduler.jobs.queries import job_tasks_window, task_counts, task_placement
from scheduler.execution.logs import may_read_log, read_tail
from scheduler.models import Attempt
from scheduler.store.states import TERMINAL_JOB_VALUES
from scheduler.board.queue import RoundRobinPlace, round_robin_place
from scheduler.board.read import newest_board_tick, queue_index
from scheduler.jobs.feasibility import never_runs
from scheduler.jobs.request import normalize_job_id
from scheduler.jobs.submit import submit_job
from scheduler.views.common import (
    POLL_SECONDS,
    apply_service_error,
    denied,
    no_change,
    page_or_fragment,
    unchanged,
    window,
    require_POST,
)
from scheduler.views.forms import JobForm, WhatIfForm

# Tasks shown per page on a job's detail page.
TASKS_PER_PAGE = 50
JOB_FIELDS = {
    "device.type": "device_type",
    "device.variant": "device_variant",
    "device.count": "device_count",
    "device": "device_type",
    "cpu": "cpu",
    "memory": "memory",
}


def job_name(job_id: str) -> str:
    try:
        return normalize_job_id(job_id, "job")
    except InvalidArgument:
        raise Http404(f"{job_id!r} is not a job id.") from None


def get_job(job_id: str):
    name = job_name(job_id)
    job = jobs_queries.jobs().filter(name=name).first()
    if job is None:
        raise Http404(f"There is no job {name}.")
    return job


@dataclass
class Group:
    """One group's header row in a grouped table: its key (a user or a band rank), label and size."""

    key: object
    label: str
    jobs: int


def listing_context(request, newest=None) -> dict:
    """The table's filter, sort, grouping and one page of rows, or the error a bad value got.

    A fixed number of queries: over-budget users (3), count (exact up to ``listing.COUNT_LIMIT``;
    and, filtered, the unfinished count), page, task counts, group counts,
    and (once per tick per process) the workers the NEVER marker's analysis reads. ``newest``:
    the newest board tick (``board.read.newest_board_tick``), whose key the analysis is cached by.
    """
    try:
        job_filter = listing.parse_filter(request.GET)
        view = listing.parse_view(request.GET)
    except InvalidArgument as exc:
        return {"error": exc.message, "jobs": [], "filter": request.GET, "view": listing.JobView(), "groups": []}
    over = listing.over_budget_users()
    qs = listing.filtered_jobs(job_filter, over)
    counted = listing.count_of(qs)
    total = counted.n
    # Keyset pages (listing.page_of): a cursor from the pager's links, or an old ?page=N link,
    # kept within the last page and the offset limit.
    win = window(request, min(total, listing.MAX_OFFSET + listing.PAGE_SIZE), listing.PAGE_SIZE)
    try:
        keyset = listing.page_of(qs, view, cursor=request.GET.get("cursor") or None, number=win.number)
    except InvalidArgument as exc:
        return {"error": exc.message, "jobs": [], "filter": job_filter.given, "view": view, "groups": []}
    page = keyset.jobs
    counts = task_counts([job.pk for job in page])
    # The NEVER marker: each shape analysed once per tick (the queue's and the job page's verdict).
    never = never_runs(page, newest.tick if newest is not None else None)
    groups: dict = {}
    if view.group:
        sizes = listing.group_counts(qs, view.group)
        groups = {key: Group(key, key if view.group == "user" else Band(key).name, n) for key, n in sizes.items()}
    previous = object()
    for job in page:
        job.counts = counts.get(job.pk, {})
        job.downgraded = job.effective != job.band
        job.never = job.name in never
        job.live = JobState(job.state) not in TERMINAL_JOB_STATES  # only a live job can be picked to cancel
        key = getattr(job, listing.GROUPS[view.group]) if view.group else None
        job.group_head = groups.get(key) if view.group and key != previous else None
        previous = key
    # What "Cancel all N matching" would cancel: the unfinished ones (shown only with a filter).
    # Named as a null finished_state rather than "not terminal" (the same rows): the state's
    # indexes, which lead with it, then read only the live jobs, not a user's or a state's whole
    # history.
    unfinished = qs.filter(finished_state__isnull=True).count() if job_filter.given else 0
    return {
        "jobs": page,
        "page": keyset,
        "total": total,
        "total_exact": counted.exact,
        "unfinished": unfinished,
        "filter": job_filter.given,
        "view": view,
        "first_row": keyset.offset + 1 if keyset.offset is not None and page else None,
        "last_row": keyset.offset + len(page) if keyset.offset is not None else None,
        "groups": sorted(groups.values(), key=lambda g: g.key),
        "selection_query": urlencode(job_filter.given),
    }


# The id of the jobs table's polled part (its rows, pager and counts; not the filter form, which
# a refresh must not reset while someone types).
JOBS_ROWS = "jobs-rows"


@login_required
def jobs(request):
    """The jobs table. Its rows poll like the queue: every few seconds with ``since=<newest
    tick>``, answered 204 (one indexed query) until a newer tick, then re-rendered whole."""
    newest = newest_board_tick()
    marker = newest.tick[0] if newest is not None else None
    poll = bool(request.htmx) and request.htmx.target == JOBS_ROWS
    if poll and unchanged(request, marker):
        return no_change()
    context = listing_context(request, newest)
    context.update(
        me=request.user.username,
        states=[s.value for s in JobState],
        bands=BANDS_IN_ORDER,
        routes=list(listing.routes()),
        sorts=list(listing.SORTS),
        columns=JOB_COLUMNS,
        colspan=len(JOB_COLUMNS) + 1,  # and the selection box
        admin=roles.is_admin(request.user),
        since=marker,
        poll=None if "error" in context else POLL_SECONDS,
    )
    return page_or_fragment(
        request, "scheduler/jobs.html", "rows" if poll else "list", context, status=400 if "error" in context else 200
    )


@login_required
@require_POST
def cancel_jobs(request):
    """Bulk cancel of ticked jobs (``ids``) or of the whole filtered set (the filter's fields,
    with ``scope=filter``). Without ``confirm`` it shows what would be killed; with it, kills."""
    params = request.POST
    try:
        if params.get("scope") == "filter":
            selection = jobs_cancel.Selection(
                filter=listing.parse_filter({k: params[k] for k in listing.FILTER_KEYS if k in params})
            )
        else:
            selection = jobs_cancel.Selection(names=tuple(params.getlist("ids")))
        if params.get("confirm") != "yes":
            preview = jobs_cancel.preview_cancel(request.user, selection)
            context = {
                "preview": preview,
                "params": [
                    (k, v) for k in params for v in params.getlist(k) if k not in ("csrfmiddlewaretoken", "confirm")
                ],
                "back": request.POST.get("back", ""),
            }
            return render(request, "scheduler/jobs_cancel.html", context)
        outcome = jobs_cancel.cancel_jobs(request.user, selection)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Cancelled {outcome.summary()}: {outcome.tasks:,} task(s) killed.")
    back = params.get("back", "")
    return redirect(f"{reverse('console:jobs')}{back if back.startswith('?') else ''}")


def why_sentences(explain: dict, job, viewer, place: RoundRobinPlace | None) -> list[str]:
    """What would change the outcome, in the second person for the job's owner."""
    own = viewer.username == job.user
    who, whose = ("you are", "your") if own else (f"{job.user} is", f"{job.user}'s")
    state = explain["state"]
    if state in TERMINAL_JOB_VALUES:
        return [f"Nothing: the job has finished ({state})."]
    pending = [t for t in explain["tasks"] if t["state"] == "pending"]
    sentences = []
    never = explain.get("never")
    if never is not None and any(t["state"] == "pending" for t in explain["tasks"]):
        # The verdict first: a job that can never run is told what to change, not its place.
        sentences.append(
            f"It can never run on the cluster as it is: {never.text()}. Only a change helps: cancel "
            f"it and submit again asking for what a worker has, or ask an operator for a worker that "
            f"meets every requirement; waiting and its place in the queue change nothing."
        )
    downgrade = explain.get("downgrade")
    requested = explain["requested_band"]
    if downgrade:
        sentences.append(downgrade["why"].advice(who[0].upper() + who[1:] if own else who, whose))
    if not pending:
        sentences.append("Nothing is waiting: every unfinished task of this job is placed.")
        if downgrade:
            sentences.append("Tasks already running keep the band they were stamped with when placed.")
        return sentences

    if explain["position"] is None and any(
        (t["pending_reason"] or {}).get("code") == NOT_YET_TICKED["code"] for t in pending
    ):
        sentences.append("No tick has looked at it yet; the next tick (every few seconds) places it or says why not.")
    if never is not None:
        return sentences  # the queue's facts (tasks ahead, turns, the last word) would contradict the verdict
    if explain["position"] and explain["position"] > 1:
        band = explain["queued_band"].name
        sentences.append(
            f"{explain['position'] - 1:,} task(s) are ahead of it in the {band} queue (as of tick {explain['tick']})."
        )
    if place and len(place.users) > 1:
        sentences.append(
            f"Within {place.band.name}, users take turns, lower spend first: {job.user} goes "
            f"{ordinal(place.turn)} of {len(place.users)} and has {place.ahead_own:,} task(s) of their own ahead "
            f"of this one."
        )
    reason = explain.get("pending_reason")
    if explain["position"] is not None and reason and reason["code"] != NOT_YET_TICKED["code"]:
        sentences.append(f"The scheduler's last word on it (tick {explain['tick']}): {cause_text(reason)}.")
    if requested is Band.BATCH and not downgrade:
        sentences.append("BATCH work runs when no higher band needs the capacity.")
    return sentences


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def job_context(request, job) -> dict:
    index = queue_index()
    explain = explain_job(job, index)
    counts = task_counts([job.pk]).get(job.pk, {})
    place = None
    if explain["position"] is not None:
        place = round_robin_place(index, int(explain["queued_band"]), explain["position"])
    win = window(request, job.replicas, TASKS_PER_PAGE)
    tasks = job_tasks_window(job, offset=win.offset, limit=win.size)
    explained = {t["task"]: t for t in explain["tasks"]}
    for task in tasks:
        facts = explained.get(f"{job.name}/{task.index}", {})
        task.pending_reason = facts.get("pending_reason")
        task.changed_since_tick = facts.get("changed_since_tick", False)
        task.attempt_list = list(task.attempts.all())  # prefetched: each links to its log
        task.last_attempt = task.attempt_list[-1] if task.attempt_list else None
        # Placed: the stamped band and worker; finished: its last attempt's (jobs.queries).
        task.shown_band, task.shown_worker = task_placement(task)
    finished = job.state in TERMINAL_JOB_VALUES
    return {
        "job": job,
        "explain": explain,
        "counts": sorted(counts.items()),
        "place": place,
        "why": why_sentences(explain, job, request.user, place),
        "tasks": tasks,
        "window": win,
        "finished": finished,
        "poll": None if finished else POLL_SECONDS,
        "can_cancel": not finished and owns_job(request.user, job),
        "own": request.user.username == job.user,
        "children": list(job.children.order_by("name").values_list("name", "state")[:50]),
        "downgraded": explain["downgrade"] is not None,
        # What was really submitted, from any client (argv only where a CLI sent one).
        "request_json": json.dumps(job.request, indent=2, ensure_ascii=False) if job.request else "",
    }


@login_required
def job_detail(request, job_id: str):
    job = get_job(job_id)
    return page_or_fragment(request, "scheduler/job_detail.html", "live", job_context(request, job))


@login_required
@require_POST
def cancel_job(request, job_id: str):
    name = job_name(job_id)
    try:
        outcome = jobs_cancel.cancel_job(request.user, name)
    except ServiceError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from None
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Cancelled {outcome.job}: {outcome.killed_tasks:,} task(s) killed.")
    return redirect("console:job", job_id=name.strip("/"))


# Bytes of a log shown inline (its tail), and seconds between refreshes while following it.
LOG_TAIL_BYTES = 64 * 1024
LOG_POLL_SECONDS = 2


@login_required
def attempt_log(request, task_pk: int, attempt: int):
    """One attempt's log tail; while the attempt runs (and ``follow`` is not 0) the fragment
    polls itself, and the first render after the attempt ended has no trigger: polling stops."""
    row = Attempt.objects.select_related("task__job", "worker").filter(task_id=task_pk, number=attempt).first()
    if row is None:
        raise Http404(f"Task {task_pk} has no attempt {attempt}.")
    job = row.task.job
    if not may_read_log(request.user, job):
        raise denied(request.user, f"The log of {job.name}", f"its owner ({job.user}), operators and admins")
    running = row.finished_at is None
    follow = running and request.GET.get("follow") != "0"
    context = {
        "attempt": row,
        "task": row.task,
        "job": job,
        "log": read_tail(task_pk, attempt, LOG_TAIL_BYTES),
        "running": running,
        "follow": follow,
        "poll": LOG_POLL_SECONDS,
        "tail_bytes": LOG_TAIL_BYTES,
    }
    return page_or_fragment(request, "scheduler/attempt_log.html", "log", context)


@login_required
def submit(request):
    form = JobForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            job = submit_job(request.user, form.service_data())
        except ServiceError as exc:
            apply_service_error(form, exc, JOB_FIELDS)
        else:
            messages.success(
                request,
                f"Submitted {job.name} as {Band(job.band).name} with {job.replicas:,} task(s). "
                f"It joins the queue at the next tick.",
            )
            for warning in job.warnings:
                messages.warning(request, f"Warning: {warning}")
            return redirect("console:job", job_id=job.name.strip("/"))
    status = 400 if request.method == "POST" else 200
    budget = budget_view(request.user.username)
    return page_or_fragment(
        request,
        "scheduler/submit.html",
        "form",
        {"form": form, "budget": budget, "admin": roles.is_admin(request.user)},
        status=status,
    )


@login_required
def what_if(request):
    asked = bool(request.GET)
    form = WhatIfForm(request.GET if asked else None)
    answer = None
    if asked and form.is_valid():
        try:
            answer = jobs_whatif.what_if(request.user, form.service_data())
        except ServiceError as exc:
            apply_service_error(form, exc, JOB_FIELDS)
    context = {"form": form, "answer": answer, "operator": roles.is_operator(request.user)}
    return page_or_fragment(request, "scheduler/what_if.html", "whatif", context)
