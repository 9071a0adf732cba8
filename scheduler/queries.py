"""Read-side queries for the console and the API. Each function runs a fixed number of queries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Count, Prefetch, Q, QuerySet
from django.utils import timezone

from scheduler import budgets as budget_rules
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band, resource_value
from scheduler.core.explain import Downgrade
from scheduler.core.types import (
    ACTIVE_STATES,
    TERMINAL_JOB_STATES,
    BudgetDefaults,
    BudgetSpec,
    Device,
    DeviceType,
    Resources,
    TaskState,
)
from scheduler.models import (
    Attempt,
    AuditEntry,
    Job,
    PreemptionEvent,
    Task,
    TickRecord,
    UpliftGrant,
    UserBudget,
    Worker,
)


def recent_ticks(limit: int = 20) -> list[TickRecord]:
    return list(TickRecord.objects.defer("explanation", "spend", "limits").order_by("-started_at")[:limit])


def task_counts_by_state() -> dict[str, int]:
    return dict(Task.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


# --- API read side (budgets, jobs, queue, preemptions) ---------------------------------------------
# Appended for the REST API; each function runs a fixed number of queries whatever the number of
# tasks. Budgets are "live": spend is computed now from active tasks, not read from the last tick.

API_ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
API_TERMINAL_JOB_VALUES = sorted(s.value for s in TERMINAL_JOB_STATES)
OPEN_GRANT_STATES = (UpliftGrant.State.REQUESTED, UpliftGrant.State.APPROVED)


def budget_defaults() -> BudgetDefaults:
    return budget_rules.budget_defaults()


def live_spend(users: list[str] | None = None) -> dict[str, int]:
    """Spend per user right now, in ONE aggregate query.

    Active tasks (ASSIGNED/BUILDING/RUNNING) of jobs requested above BATCH are counted per user
    and resource shape in SQL; the core's ``resource_value`` prices each shape. The Python loop
    runs over (user, shape) groups, never over tasks. Users with zero spend are left out.
    """
    rows = Task.objects.filter(state__in=API_ACTIVE_VALUES, job__band__lt=int(Band.BATCH))
    if users is not None:
        rows = rows.filter(job__user__in=users)
    groups = (
        rows.order_by()
        .values_list(
            "job__user", "job__cpu_millicores", "job__memory_bytes", "job__device_type", "job__device_variant",
            "job__device_count",
        )
        .annotate(n=Count("id"))
    )
    spend: dict[str, int] = {}
    for user, cpu, memory, device_type, variant, count, n in groups:
        device = Device() if device_type == DeviceType.CPU.value else Device(DeviceType(device_type), variant, count)
        value = resource_value(Resources(cpu, memory, device)) * n
        if value:
            spend[user] = spend.get(user, 0) + value
    return dict(sorted(spend.items()))


def effective_budget_for(user: str, at_ms: int | None = None) -> BudgetSpec:
    """One user's effective budget: row (or defaults) raised by active grants. Two queries."""
    # Not truncated to milliseconds: a grant approved a moment ago must already count.
    at = timezone.now() if at_ms is None else datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    defaults = budget_defaults()
    limit, band = budget_rows_of([user]).get(user, (defaults.budget_limit, int(defaults.max_band)))
    grants = UpliftGrant.objects.filter(
        user_id=user, state=UpliftGrant.State.APPROVED, starts_at__lte=at, expires_at__gt=at
    ).values_list("budget_limit", "max_band")
    return budget_rules.raised_by_grants(user, limit, band, grants)


def budget_rows_of(users: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """``{user: (budget_limit, max_band rank)}`` of the budget rows (of ``users``). One query."""
    rows = UserBudget.objects.all() if users is None else UserBudget.objects.filter(user_id__in=users)
    return {user: (limit, band) for user, limit, band in rows.values_list("user_id", "budget_limit", "max_band")}


@dataclass
class BudgetView:
    """A user's budget as people read it: configured, effective now, spend, and open grants."""

    user: str
    has_row: bool
    budget_limit: int
    max_band: Band
    effective_budget_limit: int
    effective_max_band: Band
    spend: int
    # The band INTERACTIVE work of this user is scheduled in right now.
    effective_band: Band
    grants: list[UpliftGrant] = field(default_factory=list)

    @property
    def over_budget(self) -> bool:
        return self.effective_budget_limit > 0 and self.spend > self.effective_budget_limit


def budget_views(users: list[str] | None = None, *, with_work: Iterable[str] = ()) -> list[BudgetView]:
    """Every user with a budget row, an open grant, spend or a name in ``with_work`` (or just
    ``users``), by name. Four queries."""
    at = timezone.now()
    defaults = budget_defaults()
    grants_qs = (
        UpliftGrant.objects.filter(state__in=OPEN_GRANT_STATES)
        .select_related("requested_by", "decided_by")
        .order_by("-created_at", "-pk")
    )
    if users is not None:
        grants_qs = grants_qs.filter(user_id__in=users)
    rows = budget_rows_of(users)
    open_grants: dict[str, list[UpliftGrant]] = {}
    for grant in grants_qs:
        if grant.state == UpliftGrant.State.APPROVED and grant.expires_at and grant.expires_at <= at:
            continue  # expired, not yet marked so by the beat task
        open_grants.setdefault(grant.user_id, []).append(grant)
    spend = live_spend(users)
    names = set(users) if users is not None else set(rows) | set(open_grants) | set(spend) | set(with_work)
    result = []
    for user in sorted(names):
        limit, band = rows.get(user, (defaults.budget_limit, int(defaults.max_band)))
        active = [
            (g.budget_limit, g.max_band) for g in open_grants.get(user, ())
            if g.state == UpliftGrant.State.APPROVED and g.starts_at and g.starts_at <= at
        ]
        spec = budget_rules.raised_by_grants(user, limit, band, active)
        result.append(
            BudgetView(
                user=user,
                has_row=user in rows,
                budget_limit=limit,
                max_band=Band(band),
                effective_budget_limit=spec.budget_limit,
                effective_max_band=spec.max_band,
                spend=spend.get(user, 0),
                effective_band=effective_band(Band.INTERACTIVE, user, spend, {user: spec}, defaults),
                grants=open_grants.get(user, []),
            )
        )
    return result


def budget_view(user: str) -> BudgetView:
    return budget_views([user])[0]


def user_is_known(user: str) -> bool:
    """A Django user, a budget row, a grant or a job carries this name."""
    from django.contrib.auth import get_user_model

    return (
        get_user_model().objects.filter(username=user).exists()
        or UserBudget.objects.filter(user_id=user).exists()
        or UpliftGrant.objects.filter(user_id=user).exists()
        or Job.objects.filter(user=user).exists()
    )


# --- jobs -----------------------------------------------------------------------------------------


def jobs(*, user: str | None = None, band: Band | None = None, state: str | None = None) -> QuerySet[Job]:
    """Jobs newest first, filtered. Pair with ``task_counts`` for the page shown."""
    qs = Job.objects.select_related("parent").order_by("-submitted_at_ms", "-pk")
    if user:
        qs = qs.filter(user=user)
    if band is not None:
        qs = qs.filter(band=int(band))
    if state:
        qs = qs.filter(state=state)
    return qs


def task_counts(job_pks: list[int]) -> dict[int, dict[str, int]]:
    """``{job pk: {state: n}}`` for the given jobs, one grouped query."""
    counts: dict[int, dict[str, int]] = {pk: {} for pk in job_pks}
    for job_pk, state, n in (
        Task.objects.filter(job_id__in=job_pks).order_by().values_list("job_id", "state").annotate(n=Count("id"))
    ):
        counts[job_pk][state] = n
    return counts


def job_detail(name: str) -> Job | None:
    """A job with its tasks (by index), their workers and attempts: four queries."""
    attempts = Attempt.objects.select_related("worker").order_by("number")
    tasks = Task.objects.select_related("worker").order_by("index").prefetch_related(Prefetch("attempts", attempts))
    return (
        Job.objects.select_related("parent")
        .prefetch_related(Prefetch("tasks", tasks), Prefetch("children", Job.objects.order_by("name").only("name", "parent")))
        .filter(name=name)
        .first()
    )


# --- the queue, from the newest tick's explanation (indexed below: ``queue_index``) --------------


@dataclass(frozen=True)
class QueueEntry:
    task: str
    job: str
    index: int
    user: str
    band: Band
    position: int
    reason: str


def split_task_id(task_id: str) -> tuple[str, int]:
    job, _, index = task_id.rpartition("/")
    return job, int(index)


# --- preemptions, audit, grants, workers ---------------------------------------------------------


def preemptions(
    *, user: str | None = None, band: Band | None = None, since: datetime | None = None, job: str | None = None
) -> QuerySet[PreemptionEvent]:
    """Preemption events newest first; filters apply to the victim (its user, stamped band, job)."""
    qs = PreemptionEvent.objects.select_related("victim__job", "preemptor__job", "worker").order_by(
        "-created_at", "-pk"
    )
    if user:
        qs = qs.filter(victim__job__user=user)
    if band is not None:
        qs = qs.filter(victim_band=int(band))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if job:
        qs = qs.filter(victim__job__name=job)
    return qs


def audit_entries() -> QuerySet[AuditEntry]:
    return AuditEntry.objects.select_related("actor").order_by("-created_at", "-pk")


def uplift_grants(*, user: str | None = None, state: str | None = None) -> QuerySet[UpliftGrant]:
    qs = UpliftGrant.objects.select_related("requested_by", "decided_by").order_by("-created_at", "-pk")
    if user:
        qs = qs.filter(user_id=user)
    if state:
        qs = qs.filter(state=state)
    return qs


def workers_with_load() -> QuerySet[Worker]:
    """Workers by name, with how many tasks are active on each (one query)."""
    return Worker.objects.annotate(
        active_tasks=Count("tasks", filter=Q(tasks__state__in=API_ACTIVE_VALUES))
    ).order_by("name")


# --- explain a job --------------------------------------------------------------------------------


def downgrade_text(requested: Band, spend: int, limit: int) -> str:
    """The core's wording, e.g. "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"."""
    return Downgrade(requested, Band.BATCH, spend, limit).text()


def explain_job(job: Job, index: QueueIndex | None = None) -> dict:
    """Why a job runs (or waits) where it does, with the numbers. A fixed number of queries.

    Queue facts come from ``index`` (default: ``queue_index()``, which parses the newest tick's
    explanation only once per tick per process).
    """
    requested = Band(job.band)
    spend_now = live_spend([job.user]).get(job.user, 0)
    budget = effective_budget_for(job.user)
    defaults = budget_defaults()
    effective = effective_band(requested, job.user, {job.user: spend_now}, {job.user: budget}, defaults)
    downgrade = None
    if effective != requested:
        downgrade = {"spend": spend_now, "limit": budget.budget_limit,
                     "text": downgrade_text(requested, spend_now, budget.budget_limit)}

    if index is None:
        index = queue_index()
    task_rows = list(
        Task.objects.filter(job=job).order_by("index").values_list("index", "state", "band", "worker__name")
    )
    tasks = []
    best: tuple[int, int, str] | None = None  # (band rank, position, reason) of the job's first queued task
    for task_index, state, band, worker in task_rows:
        task_id = f"{job.name}/{task_index}"
        entry = index.locate(task_id) if state == TaskState.PENDING.value else None
        reason = None
        position = None
        task_band = Band(band).wire if band is not None and state != TaskState.PENDING.value else None
        if entry is not None:
            rank, position = int(entry.band), entry.position
            reason = entry.reason or None
            task_band = entry.band.wire
            if best is None or (rank, position) < best[:2]:
                best = (rank, position, reason or "")
        elif state == TaskState.PENDING.value:
            reason = "Waiting for the next scheduling tick"
            task_band = effective.wire
        tasks.append({"task": task_id, "state": state, "band": task_band, "worker": worker,
                      "position": position, "pending_reason": reason})

    events = list(
        PreemptionEvent.objects.filter(victim__job=job)
        .select_related("victim__job", "preemptor__job", "worker")
        .order_by("-created_at", "-pk")
    )
    preempted = [
        {
            "victim": f"{e.victim.job.name}/{e.victim.index}",
            "preemptor": f"{e.preemptor.job.name}/{e.preemptor.index}",
            "preemptor_band": Band(e.preemptor_band).wire,
            "worker": e.worker.name if e.worker else None,
            "at": e.created_at,
            "reason": e.reason,
        }
        for e in events
    ]
    pending = [t for t in tasks if t["state"] == TaskState.PENDING.value]
    pending_reason = best[2] if best else (pending[0]["pending_reason"] if pending else None)
    position = best[1] if best else None
    queue_band = Band(best[0]) if best else (effective if pending else None)
    return {
        "job": job.name,
        "user": job.user,
        "state": job.state,
        "requested_band": requested.wire,
        "effective_band": effective.wire,
        "downgrade": downgrade,
        "spend": spend_now,
        "limit": budget.budget_limit,
        "position": position,
        "band_queue_length": (
            index.count(int(queue_band)) if queue_band is not None and index.tick_pk is not None else None
        ),
        "pending_reason": pending_reason,
        "tick": index.tick_pk,
        "tasks": tasks,
        "preemptions": preempted,
        "what_would_change": what_would_change(job, requested, effective, spend_now, budget, pending, position,
                                               pending_reason),
    }


def what_would_change(
    job: Job, requested: Band, effective: Band, spend: int, budget: BudgetSpec, pending: list[dict],
    position: int | None, pending_reason: str | None,
) -> str:
    """One paragraph a researcher can act on."""
    if job.state in API_TERMINAL_JOB_VALUES:
        return f"Nothing: the job has finished ({job.state})."
    if not pending:
        return "Nothing is waiting: every unfinished task of this job is placed."
    parts = []
    if effective != requested:
        parts.append(
            f"{job.user}'s spend ({spend:,}) is over the limit ({budget.budget_limit:,}), so pending tasks queue as "
            f"BATCH behind all INTERACTIVE work. They queue as {requested.name} again once spend is back to "
            f"{budget.budget_limit:,} or less (other work of {job.user} finishing or being cancelled), or when an "
            f"admin approves a higher budget_limit (iris uplift request)."
        )
    if position is not None and position > 1:
        parts.append(f"{position - 1:,} task(s) are ahead of it in the {effective.name} queue.")
    if pending_reason:
        parts.append(f"Scheduler: {pending_reason}.")
    if effective == requested and requested is Band.BATCH:
        parts.append("BATCH work runs when no higher band needs the capacity.")
    return " ".join(parts) or "It should be placed at the next tick."


# --- console read side ----------------------------------------------------------------------------
# Appended for the console (scheduler/views/). Each function runs the fixed number of queries its
# docstring names, whatever the number of tasks, jobs, users or workers.

# A job preempted at least this many times is flagged on the preemption history: once is the
# policy working; three times means the job keeps losing its place and its owner should know why.
REPEATED_PREEMPTIONS = 3


@dataclass(frozen=True)
class QueueIndex:
    """The newest tick's queue, indexed once per tick so pages of it cost nothing to cut.

    ``ids[rank]`` lists that band's pending task ids in scheduling order (position = index + 1),
    ``reason_of[rank]`` the matching indices into ``reasons`` and ``owner[rank]`` the users.
    ``users[rank]`` is the band's round-robin order (each user's first appearance: lower spend
    first). ``spend`` and ``limits`` are the tick's own samples, so a downgrade badge shows the
    numbers the tick decided with.
    """

    tick_pk: int | None
    tick_at: datetime | None
    spend: dict[str, int]
    limits: dict[str, int]
    reasons: list[str]
    ids: dict[int, list[str]]
    reason_of: dict[int, list[int]]
    owner: dict[int, list[str]]
    users: dict[int, list[str]]

    # {task id: (rank, offset in band)}, built on the first ``locate`` (see there).
    _where: dict[str, tuple[int, int]] | None = field(default=None, compare=False, repr=False)

    def count(self, rank: int) -> int:
        return len(self.ids.get(rank, ()))

    def band_counts(self) -> dict[int, int]:
        """``{rank: pending tasks}`` of the bands that have any, highest band first."""
        return {rank: len(self.ids[rank]) for rank in sorted(self.ids) if self.ids[rank]}

    def entry(self, rank: int, offset: int) -> QueueEntry:
        """The queue entry at ``offset`` (0-based) of band ``rank``; its position is ``offset + 1``."""
        task_id = self.ids[rank][offset]
        job_id, task_index = split_task_id(task_id)
        reason_index = self.reason_of[rank][offset]
        reason = self.reasons[reason_index] if 0 <= reason_index < len(self.reasons) else ""
        return QueueEntry(task_id, job_id, task_index, self.owner[rank][offset], Band(rank), offset + 1, reason)

    def locate(self, task_id: str) -> QueueEntry | None:
        """The entry of a queued task, or None if the tick did not queue it.

        The first call maps every queued task id (tens of milliseconds for 100,000 tasks), once
        per index, that is once per tick per process; later calls are dictionary lookups. The map
        is built aside and published whole, so a concurrent reader never sees half of it.
        """
        where = self._where
        if where is None:
            where = {task: (rank, i) for rank, ids in self.ids.items() for i, task in enumerate(ids)}
            object.__setattr__(self, "_where", where)
        found = where.get(task_id)
        return None if found is None else self.entry(*found)

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.ids.values())

    def pending_by_user(self) -> dict[tuple[int, str], int]:
        """``{(effective band rank, user): pending tasks}``: one pass over the index."""
        counts: dict[tuple[int, str], int] = {}
        for rank, owners in self.owner.items():
            for user in owners:
                key = (rank, user)
                counts[key] = counts.get(key, 0) + 1
        return counts


EMPTY_QUEUE = QueueIndex(None, None, {}, {}, [], {}, {}, {}, {})
# Only the newest index is kept: ticks replace it every few seconds.
_queue_index_cache: dict[tuple[int, int], QueueIndex] = {}


def newest_explained_tick() -> int | None:
    """The pk of the newest tick that kept its queue explanation. One query."""
    return TickRecord.objects.filter(explanation__isnull=False).order_by("-pk").values_list("pk", flat=True).first()


def _newest_explained_tick_key() -> tuple[int, int] | None:
    """(pk, now_ms) of that tick: the cache key, so a reused pk (a test database) never hits."""
    return TickRecord.objects.filter(explanation__isnull=False).order_by("-pk").values_list("pk", "now_ms").first()


def queue_index() -> QueueIndex:
    """The newest tick's queue, indexed. One query, plus one the first time a process sees a tick.

    Parsing the explanation of 100,000 pending tasks takes tens of milliseconds; the index is
    cached per process until a newer tick replaces it, so polling pages only pay for the first.
    """
    key = _newest_explained_tick_key()
    if key is None:
        return EMPTY_QUEUE
    pk = key[0]
    cached = _queue_index_cache.get(key)
    if cached is not None:
        return cached
    row = TickRecord.objects.filter(pk=pk).values_list("started_at", "spend", "limits", "explanation").first()
    if row is None or row[3] is None:  # a newer tick cleared it between our two reads
        return EMPTY_QUEUE
    started_at, spend, limits, explanation = row
    ids: dict[int, list[str]] = {}
    reason_of: dict[int, list[int]] = {}
    owner: dict[int, list[str]] = {}
    user_of_job: dict[str, str] = {}
    in_order = True
    # The explanation lists each band's tasks by position (1, 2, ...); checked, sorted if not.
    for task_id, (rank, position, reason) in explanation.get("tasks", {}).items():
        job_id = task_id[: task_id.rfind("/")]
        user = user_of_job.get(job_id)
        if user is None:
            user = user_of_job[job_id] = job_id.split("/", 2)[1]
        band_ids = ids.get(rank)
        if band_ids is None:
            band_ids = ids[rank] = []
            reason_of[rank], owner[rank] = [], []
        band_ids.append(task_id)
        reason_of[rank].append(reason)
        owner[rank].append(user)
        if position != len(band_ids):
            in_order = False
    if not in_order:
        tasks = explanation["tasks"]
        for rank in ids:
            order = sorted(range(len(ids[rank])), key=lambda i, r=rank: tasks[ids[r][i]][1])
            ids[rank] = [ids[rank][i] for i in order]
            reason_of[rank] = [reason_of[rank][i] for i in order]
            owner[rank] = [owner[rank][i] for i in order]
    # Each user's first appearance in a band is their turn in its round robin.
    users = {rank: list(dict.fromkeys(owners)) for rank, owners in owner.items()}
    index = QueueIndex(
        tick_pk=pk, tick_at=started_at, spend=dict(spend or {}), limits=dict(limits or {}),
        reasons=list(explanation.get("reasons", [])), ids=ids, reason_of=reason_of, owner=owner, users=users,
    )
    _queue_index_cache.clear()
    _queue_index_cache[key] = index
    return index


def job_matches(task_id: str, job: str, *, exact: bool = False) -> bool:
    """A job filter: ``/alice/train`` is that job and its children; other text is a substring.

    ``exact`` (the API's filter, given a normalised job id) matches that job only.
    """
    job_id = task_id.rpartition("/")[0]
    if exact:
        return job_id == job
    if job.startswith("/"):
        job = job.rstrip("/")
        return job_id == job or job_id.startswith(job + "/")
    return job in job_id


class QueueSelection:
    """The queue entries matching a filter, in scheduling order (by band, then position).

    A sequence for paginators: ``len`` and slices. Unfiltered, it holds ranges and cutting a
    window is O(window); a filter scans each band it covers once (strings only). No query.
    """

    def __init__(self, index: QueueIndex, ranks: list[int], *, user: str | None = None, job: str | None = None,
                 exact_job: bool = False) -> None:
        self.index = index
        self.parts: list[tuple[int, range | list[int]]] = []
        for rank in ranks:
            ids = index.ids.get(rank, [])
            owners = index.owner.get(rank, [])
            if user or job:
                matches: range | list[int] = [
                    i for i in range(len(ids))
                    if (not user or owners[i] == user) and (not job or job_matches(ids[i], job, exact=exact_job))
                ]
            else:
                matches = range(len(ids))
            if matches:
                self.parts.append((rank, matches))
        self.total = sum(len(matches) for _, matches in self.parts)

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, item: slice | int):
        if isinstance(item, int):
            found = self[item:item + 1] if item >= 0 else self[self.total + item:self.total + item + 1]
            if not found:
                raise IndexError(item)
            return found[0]
        start, stop, step = item.indices(self.total)
        if step != 1:
            raise ValueError("queue selections are cut in steps of one")
        entries: list[QueueEntry] = []
        for rank, matches in self.parts:
            if start >= stop:
                break
            if start >= len(matches):
                start, stop = start - len(matches), stop - len(matches)
                continue
            entries.extend(self.index.entry(rank, i) for i in matches[start:stop])
            start, stop = 0, stop - len(matches)
        return entries


def queue_selection(
    index: QueueIndex, *, band: Band | int | None = None, user: str | None = None, job: str | None = None,
    exact_job: bool = False,
) -> QueueSelection:
    """The entries of one band (or of all, highest first) matching ``user`` and ``job``. No query."""
    ranks = sorted(index.ids) if band is None else [int(band)]
    return QueueSelection(index, ranks, user=user, job=job, exact_job=exact_job)


def queue_window(
    index: QueueIndex, rank: int, *, user: str | None = None, job: str | None = None, offset: int = 0, limit: int = 50
) -> tuple[list[QueueEntry], int]:
    """One window of a band's queue, filtered, and how many tasks match. No query."""
    selection = queue_selection(index, band=rank, user=user, job=job)
    return selection[offset:offset + limit], len(selection)


def queue_rows(entries: list[QueueEntry]) -> dict[str, Task]:
    """The current rows of the tasks on a queue page, with their jobs. One query (none if empty)."""
    if not entries:
        return {}
    by_job: dict[str, list[int]] = {}
    for entry in entries:
        by_job.setdefault(entry.job, []).append(entry.index)
    match = Q()
    for job_id, indices in by_job.items():
        match |= Q(job__name=job_id, index__in=indices)
    return {
        f"{t.job.name}/{t.index}": t
        for t in Task.objects.filter(match).select_related("job").only(
            "index", "state", "updated_at", "attempt_count", "preemption_count",
            "job__name", "job__user", "job__band", "job__state", "job__submitted_at_ms", "job__replicas",
            "job__cpu_millicores", "job__memory_bytes", "job__device_type", "job__device_variant",
            "job__device_count", "job__group_by",
        )
    }


@dataclass(frozen=True)
class RoundRobinPlace:
    """Where a queued task stands in its band's round robin across users."""

    band: Band
    position: int
    band_size: int
    user: str
    turn: int  # the user's turn in each round (1 = first)
    users: list[tuple[str, int]]  # the band's users in round-robin order, with their spend
    ahead_own: int  # the same user's tasks ahead of this one in the band


def round_robin_place(index: QueueIndex, rank: int, position: int) -> RoundRobinPlace | None:
    """The round-robin facts of the task at ``position`` (1-based) of band ``rank``. No query."""
    owners = index.owner.get(rank, [])
    if not 1 <= position <= len(owners):
        return None
    user = owners[position - 1]
    band_users = index.users.get(rank, [])
    ahead_own = sum(1 for u in owners[: position - 1] if u == user)
    return RoundRobinPlace(
        band=Band(rank), position=position, band_size=len(owners), user=user,
        turn=band_users.index(user) + 1 if user in band_users else 0,
        users=[(u, int(index.spend.get(u, 0))) for u in band_users],
        ahead_own=ahead_own,
    )


@dataclass
class BudgetRow:
    """A budget as the console's table shows it: the API's facts plus task counts."""

    view: BudgetView
    running: int = 0
    pending: int = 0
    active_jobs: int = 0

    @property
    def percent(self) -> float | None:
        """Spend as a percentage of the effective limit; None when unlimited."""
        limit = self.view.effective_budget_limit
        return None if limit <= 0 else 100.0 * self.view.spend / limit


def task_counts_by_user() -> dict[str, dict[str, int]]:
    """``{user: {"pending", "running", "jobs"}}`` over unfinished work. Two grouped queries."""
    counts: dict[str, dict[str, int]] = {}
    for user, state, n in (
        Task.objects.filter(state__in=[TaskState.PENDING.value, *API_ACTIVE_VALUES])
        .order_by().values_list("job__user", "state").annotate(n=Count("id"))
    ):
        bucket = counts.setdefault(user, {"pending": 0, "running": 0, "jobs": 0})
        bucket["pending" if state == TaskState.PENDING.value else "running"] += n
    for user, n in (
        Job.objects.exclude(state__in=API_TERMINAL_JOB_VALUES).order_by().values_list("user").annotate(n=Count("id"))
    ):
        counts.setdefault(user, {"pending": 0, "running": 0, "jobs": 0})["jobs"] = n
    return counts


def budget_rows(users: list[str] | None = None) -> list[BudgetRow]:
    """``budget_views`` of every user with a budget row, an open grant, spend or unfinished work,
    with their task counts. Six queries.

    Users known only by their unfinished work get the cluster defaults. Sorted as Iris's
    dashboard: most active jobs first, then most running tasks, then by name.
    """
    counts = task_counts_by_user()
    rows = []
    for view in budget_views(users, with_work=counts):
        mine = counts.get(view.user, {})
        rows.append(BudgetRow(view, running=mine.get("running", 0), pending=mine.get("pending", 0),
                              active_jobs=mine.get("jobs", 0)))
    rows.sort(key=lambda r: (-r.active_jobs, -r.running, r.view.user))
    return rows


@dataclass(frozen=True)
class SpendSample:
    at: datetime
    spend: dict[str, int]
    limits: dict[str, int]


def spend_samples(*, since: datetime, points: int = 240) -> list[SpendSample]:
    """Tick spend and limit samples since ``since``, oldest first, thinned to about ``points``.

    Two queries: how many ticks the window holds, then every k-th of them counted back from the
    newest (so the newest tick is always in), whatever the number of ticks or users.
    """
    from django.db.models import F, Subquery

    window = TickRecord.objects.filter(started_at__gte=since)
    every = max(1, -(-window.count() // max(points, 1)))
    qs = window
    if every > 1:
        newest = Subquery(TickRecord.objects.order_by("-pk").values("pk")[:1])
        qs = qs.annotate(_slot=(newest - F("pk")) % every).filter(_slot=0)
    rows = list(qs.order_by("-pk").values_list("started_at", "spend", "limits")[: points + 1])
    rows.reverse()
    return [SpendSample(at, dict(spend or {}), dict(limits or {})) for at, spend, limits in rows]


@dataclass
class WorkerUse:
    """What a worker's unfinished attempts hold (the scheduler counts the same)."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    chips: int = 0
    attempts: int = 0


def worker_use(worker_pks: list[int]) -> dict[int, WorkerUse]:
    """Capacity held on each worker by attempts not yet finished there. One grouped query.

    An attempt holds its task's request from assignment until the worker confirms its process
    ended, including a preempted or cancelled attempt still shutting down.
    """
    from django.db.models import Sum

    use = {pk: WorkerUse() for pk in worker_pks}
    rows = (
        Attempt.objects.filter(worker_id__in=worker_pks, finished_at__isnull=True)
        .order_by().values_list("worker_id")
        .annotate(
            cpu=Sum("task__job__cpu_millicores"),
            mem=Sum("task__job__memory_bytes"),
            chips=Sum("task__job__device_count", filter=~Q(task__job__device_type=DeviceType.CPU.value)),
            n=Count("id"),
        )
    )
    for worker_pk, cpu, mem, chips, n in rows:
        use[worker_pk] = WorkerUse(cpu or 0, mem or 0, chips or 0, n)
    return use


def worker_tasks(worker_pks: list[int]) -> dict[int, list[Task]]:
    """Active tasks on each of the given workers, by job and index. One query."""
    result: dict[int, list[Task]] = {pk: [] for pk in worker_pks}
    for task in (
        Task.objects.filter(worker_id__in=worker_pks, state__in=API_ACTIVE_VALUES)
        .select_related("job").only("index", "state", "band", "worker_id", "job__name", "job__user")
        .order_by("job__name", "index")
    ):
        result[task.worker_id].append(task)
    return result


def preemption_counts(events: QuerySet[PreemptionEvent], limit: int = 20) -> list[dict]:
    """Victim jobs of ``events`` with the most preemptions first. One grouped query.

    ``repeated`` flags jobs preempted at least ``REPEATED_PREEMPTIONS`` times.
    """
    rows = (
        events.order_by().values("victim__job__name", "victim__job__user")
        .annotate(n=Count("id"), tasks=Count("victim", distinct=True))
        .order_by("-n", "victim__job__name")[:limit]
    )
    return [
        {"job": r["victim__job__name"], "user": r["victim__job__user"], "count": r["n"], "tasks": r["tasks"],
         "repeated": r["n"] >= REPEATED_PREEMPTIONS}
        for r in rows
    ]


def job_tasks_window(job: Job, *, offset: int = 0, limit: int = 50) -> list[Task]:
    """A window of a job's tasks by index, with workers and attempts. Two queries."""
    attempts = Attempt.objects.select_related("worker").order_by("number")
    return list(
        Task.objects.filter(job=job).select_related("worker").order_by("index")
        .prefetch_related(Prefetch("attempts", attempts))[offset:offset + limit]
    )


def running_by_band_user() -> dict[tuple[int, str], int]:
    """``{(stamped band rank, user): active tasks}``. One grouped query."""
    return {
        (band, user): n
        for band, user, n in Task.objects.filter(state__in=API_ACTIVE_VALUES)
        .order_by().values_list("band", "job__user").annotate(n=Count("id"))
        if band is not None
    }


def newest_preemption() -> int | None:
    """The pk of the newest preemption event (pollers compare it). One query."""
    return PreemptionEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
