"""Explanation storage: a decision turned into the queue the console, the API and the CLI read
(every still-pending task's effective band, requested band, position, and reason as data),
stored with the tick.

Positions and band counts come from :func:`scheduler.core.explain.pending_queue`, the one
definition; reasons are stored as records (code and parameters), never as text, so nothing
downstream parses text back.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from scheduler.core.bands import Band
from scheduler.core.explain import pending_queue, reason_record
from scheduler.core.types import ANY_VARIANT, ClusterSnapshot, Decision, DeviceType
from scheduler.core.whatif import queue_counts

# The what-if basis's shape (``whatif_basis_to_json``).
WHATIF_BASIS_VERSION = 3

# The stored shape's version: 2 = reasons as records. Version 1 (no "version" key)
# stored reasons as text and positions counted differently; readers treat it as unexplained.
EXPLANATION_VERSION = 2


def explanation_to_json(
    snapshot: ClusterSnapshot,
    decision: Decision,
    queue: Mapping[Band, list[str]] | None = None,
    job_counts: dict[int, dict[str, int]] | None = None,
) -> dict:
    """The queue as the newest tick left it.

    Shape: ``{"version": 2, "tasks": {task_id: [effective band rank, requested band rank,
    position in band (1-based), reason index]}, "reasons": [record, ...], "band_counts":
    {rank: n}}``, tasks listed band by band in position order. A record is
    ``{"code", <parameters>, "downgrade"?}`` (docs/api.md lists the codes). Records are
    interned: thousands of tasks share a handful of reasons, so one record is stored per
    distinct reason (equal records from different reason objects are stored once).
    ``queue`` is ``pending_queue(decision)`` when the caller has it already; ``job_counts``,
    when given, is filled with ``{rank: {job id: queued tasks}}`` on the way (the what-if
    basis counts users from it, without a second pass over every task).
    """
    reasons: list[dict] = []
    index_of_key: dict[bytes, int] = {}
    # Reasons are shared objects (one per job or request shape): turn each into a record once.
    index_of_reason: dict[int, int] = {}
    pending_reasons = decision.pending_reasons
    jobs = snapshot.jobs
    requested_of_job: dict[str, int] = {}
    tasks: dict[str, list] = {}
    band_counts: dict[str, int] = {}
    # Method lookups bound once: this loop runs once per pending task (100,000 in a large tick).
    index_get = index_of_reason.get
    requested_get = requested_of_job.get
    for band, task_ids in (pending_queue(decision) if queue is None else queue).items():
        rank = int(band)
        band_counts[str(rank)] = len(task_ids)
        per_job: dict[str, int] = {}
        per_job_get = per_job.get
        if job_counts is not None:
            job_counts[rank] = per_job
        position = 0
        for task_id in task_ids:
            position += 1
            reason = pending_reasons[task_id]
            index = index_get(id(reason))
            if index is None:
                record = reason_record(reason)
                key = orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
                index = index_of_key.get(key)
                if index is None:
                    index = index_of_key[key] = len(reasons)
                    reasons.append(record)
                index_of_reason[id(reason)] = index
            job_id = task_id[: task_id.rfind("/")]
            per_job[job_id] = per_job_get(job_id, 0) + 1
            requested = requested_get(job_id)
            if requested is None:
                job = jobs.get(job_id)
                requested = requested_of_job[job_id] = int(job.band) if job is not None else rank
            tasks[task_id] = [rank, requested, position, index]
    return {"version": EXPLANATION_VERSION, "tasks": tasks, "reasons": reasons, "band_counts": band_counts}


def whatif_basis_to_json(
    snapshot: ClusterSnapshot,
    decision: Decision,
    job_counts: Mapping[int, Mapping[str, int]],
    holders: Mapping[str, Mapping[tuple[str, int, str, str, bool], int]] | None = None,
) -> dict:
    """What a what-if needs of this tick, without the cluster's tasks (``jobs.whatif``).

    Shape: ``{"version": 3, "queue": {rank: [[user, pending], ...]}, "attributes": [attrs, ...],
    "workers": [[name, cpu, memory, device type, variant, count, attributes index, healthy,
    free cpu, free memory, free devices, building], ...], "users": [user, ...],
    "kinds": [[device type, variant, gang], ...],
    "holders": [worker index, user index, stamped band rank, kind index, active tasks, ...],
    "holders_healthy": [[user index, stamped band rank, kind index, active tasks], ...]}``:
    ``holders`` says (five numbers a row, flat) who holds each worker after this tick's writes,
    and what kind of work it is (what the preemption rules look at: the device, with a variant
    asked as "any" resolved to the worker's, and whether it is a gang; interned in ``kinds``)
    (``board.counts.active_counts``'s ``per_worker``), ``holders_healthy`` the same summed
    over the healthy workers, users interned in ``users``; each band's users in round-robin
    order with their pending counts (``core.whatif.queue_counts`` over ``job_counts``, which
    ``explanation_to_json`` fills), and every worker with its
    totals and what it has free once this decision's placements and evictions are counted
    (``Decision.capacity_left``). Attribute maps are interned (hosts of a pool share them).
    """
    left = decision.capacity_left
    where = {name: i for i, name in enumerate(left.workers)}
    gpu = DeviceType.GPU
    attributes: list[dict] = []
    attribute_index: dict[tuple, int] = {}
    rows = []
    where_row: dict[str, int] = {}
    for w in snapshot.workers:
        where_row[w.id] = len(rows)
        key = tuple(sorted(w.attributes.items()))
        a = attribute_index.get(key)
        if a is None:
            a = attribute_index[key] = len(attributes)
            attributes.append(dict(w.attributes))
        i = where.get(w.id)
        device = w.device
        dtype = device.type
        if i is None:
            free = [0, 0, 0, 0]
        else:
            chips = left.gpu[i] if dtype is gpu else left.tpu[i]
            free = [left.cpu[i], left.mem[i], chips, left.building[i]]
        rows.append(
            [
                w.id,
                w.cpu_millicores,
                w.memory_bytes,
                dtype.value,
                device.variant or "",
                device.count,
                a,
                w.healthy,
                *free,
            ]
        )
    # Who holds each worker, flat (a list of small lists costs the reader an object each), and
    # summed over the healthy workers (what a shape matching every healthy worker reads).
    users: list[str] = []
    user_index: dict[str, int] = {}
    held_rows: list[int] = []
    on_healthy: dict[tuple[int, int, int], int] = {}
    kinds: list[list] = []
    kind_index: dict[tuple[str, str, bool], int] = {}
    workers = snapshot.workers
    cpu = DeviceType.CPU.value
    for name, held in (holders or {}).items():
        i = where_row.get(name)
        if i is None:
            continue  # not a worker of the snapshot (a Kubernetes task's node): no what-if matches it
        healthy = workers[i].healthy
        worker_variant = workers[i].device.variant or ""
        for (user, band, dtype, variant, gang), n in held.items():
            u = user_index.get(user)
            if u is None:
                u = user_index[user] = len(users)
                users.append(user)
            if dtype != cpu and (not variant or variant == ANY_VARIANT):
                variant = worker_variant  # work that asked for any variant runs as its worker's
            kind = (dtype, variant, gang)
            k = kind_index.get(kind)
            if k is None:
                k = kind_index[kind] = len(kinds)
                kinds.append(list(kind))
            held_rows += (i, u, band, k, n)
            if healthy:
                on_healthy[(u, band, k)] = on_healthy.get((u, band, k), 0) + n
    return {
        "version": WHATIF_BASIS_VERSION,
        "queue": queue_counts(job_counts, snapshot.jobs),
        "attributes": attributes,
        "workers": rows,
        "users": users,
        "kinds": kinds,
        "holders": held_rows,
        "holders_healthy": [[u, band, k, n] for (u, band, k), n in on_healthy.items()],
    }
