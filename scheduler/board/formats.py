"""Explanation storage: a decision turned into the queue the console, the API and the CLI read
(every still-pending task's effective band, requested band, position, and reason as data),
stored with the tick.

Positions and band counts come from :func:`scheduler.core.explain.pending_queue`, the one
definition; reasons are stored as records (code and parameters), never as text, so nothing
downstream parses text back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter, is_not

import orjson

from scheduler.core.bands import Band
from scheduler.core.explain import pending_queue, queued_job_counts, queued_jobs, reason_record
from scheduler.core.types import ANY_VARIANT, ClusterSnapshot, Decision, DeviceType, WorkerSpec
from scheduler.core.whatif import queue_counts

# The what-if basis's shape (``whatif_basis_to_json``).
WHATIF_BASIS_VERSION = 3

# The stored shape's version: 3 = columnar (per band, the task ids in order and parallel lists
# of reason indices and requested bands; positions and band counts implied). 2 stored a record
# per task ({task: [band, requested, position, reason]}), 1 reasons as text; readers treat
# either as unexplained (the next tick stores the queue again).
EXPLANATION_VERSION = 3


_band_of = attrgetter("band")


def explanation_to_json(
    snapshot: ClusterSnapshot,
    decision: Decision,
    queue: Mapping[Band, list[str]] | None = None,
    jobs_in_queue: Mapping[Band, list[str]] | None = None,
    job_counts: Mapping[int, Mapping[str, int]] | None = None,
) -> dict:
    """The queue as the newest tick left it.

    Shape: ``{"version": 3, "bands": {rank: {"ids": [task id, ...], "reasons": [reason index,
    ...], "requested": [requested band rank, ...]}}, "reasons": [record, ...]}``: each band's
    pending tasks in position order (position = index + 1, the band's count the list's
    length), with each task's reason (an index into ``reasons``) and the band its job asked for
    at the same index. A record is ``{"code", <parameters>, "downgrade"?}`` (docs/api.md lists
    the codes). Records are interned: thousands of tasks share a handful of reasons, so one
    record is stored per distinct reason (equal records from different reason objects are
    stored once).

    ``queue`` is ``pending_queue(decision)`` and ``jobs_in_queue`` its ``queued_jobs`` when the
    caller has them already, and ``job_counts`` their ``queued_job_counts`` (``{rank: {job id:
    queued tasks}}``; the fairness sample and the what-if basis read the same counts). No
    Python code runs per task: the per-task lists are built with ``map`` over C functions, so
    100,000 pending tasks cost milliseconds, and the stored lists of strings and small integers
    encode at orjson's speed.
    """
    if queue is None:
        queue = pending_queue(decision)
    if jobs_in_queue is None:
        jobs_in_queue = queued_jobs(queue)
    if job_counts is None:
        job_counts = queued_job_counts(jobs_in_queue)
    reasons: list[dict] = []
    index_of_key: dict[bytes, int] = {}
    # Reasons are shared objects (one per job or request shape): turn each into a record once.
    index_of_reason: dict[int, int] = {}
    reason_of_task = decision.pending_reasons.__getitem__
    jobs = snapshot.jobs
    bands: dict[str, dict] = {}
    for band, task_ids in queue.items():
        rank = int(band)
        job_ids = jobs_in_queue[band]
        per_job = job_counts[rank]
        band_reasons = list(map(reason_of_task, task_ids))
        reason_ids = list(map(id, band_reasons))
        # The band's distinct reason objects, by identity (kept alive by ``band_reasons``).
        for reason_id, reason in dict(zip(reason_ids, band_reasons)).items():
            if reason_id in index_of_reason:
                continue
            record = reason_record(reason)
            key = orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
            index = index_of_key.get(key)
            if index is None:
                index = index_of_key[key] = len(reasons)
                reasons.append(record)
            index_of_reason[reason_id] = index
        # Each job's requested band (the band itself for a job the snapshot lacks), in C when
        # the snapshot has every job (always, but for work routed elsewhere).
        # (``all``: a spec is always true, and ``None in`` would call its ``__eq__`` each.)
        specs = list(map(jobs.get, per_job))
        if all(specs):
            requested = list(map(int, map(_band_of, specs)))
        else:
            requested = [int(job.band) if job is not None else rank for job in specs]
        requested_of_job = dict(zip(per_job, requested))
        bands[str(rank)] = {
            "ids": task_ids if type(task_ids) is list else list(task_ids),
            "reasons": list(map(index_of_reason.__getitem__, reason_ids)),
            "requested": list(map(requested_of_job.__getitem__, job_ids)),
        }
    return {"version": EXPLANATION_VERSION, "bands": bands, "reasons": reasons}


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
    order with their pending counts (``core.whatif.queue_counts`` over ``job_counts``, the queue's
    ``core.explain.queued_job_counts``), and every worker with its
    totals and what it has free once this decision's placements and evictions are counted
    (``Decision.capacity_left``). Attribute maps are interned (hosts of a pool share them).
    """
    statics = worker_statics(snapshot.workers)
    left = decision.capacity_left
    if left.workers == statics.names:
        # What each worker has free, in the snapshot's worker order (the usual case).
        chips = [g if on_gpu else t for g, t, on_gpu in zip(left.gpu, left.tpu, statics.on_gpu)]
        rows = [
            [*row, *free] for row, *free in zip(statics.rows, left.cpu, left.mem, chips, left.building, strict=True)
        ]
    else:
        where = {name: i for i, name in enumerate(left.workers)}
        rows = []
        for row, name, on_gpu in zip(statics.rows, statics.names, statics.on_gpu, strict=True):
            i = where.get(name)
            if i is None:
                rows.append([*row, 0, 0, 0, 0])
            else:
                chips_left = left.gpu[i] if on_gpu else left.tpu[i]
                rows.append([*row, left.cpu[i], left.mem[i], chips_left, left.building[i]])
    users, kinds, held_rows, on_healthy = holder_columns(statics, holders or {})
    return {
        "version": WHATIF_BASIS_VERSION,
        "queue": queue_counts(job_counts, snapshot.jobs),
        "attributes": statics.attributes,
        "workers": rows,
        "users": users,
        "kinds": kinds,
        "holders": held_rows,
        "holders_healthy": [[u, band, k, n] for (u, band, k), n in on_healthy.items()],
    }


@dataclass(frozen=True, slots=True)
class WorkerStatics:
    """The what-if basis's worker columns that depend on the workers alone (not on the
    decision): ``[name, cpu, memory, device type, variant, count, attributes index, healthy]``
    per worker, the interned attribute maps, the names in order, where each name is, and
    whether its chips are GPUs."""

    workers: tuple[WorkerSpec, ...]
    rows: list[list]
    attributes: list[dict]
    names: tuple[str, ...]
    where: dict[str, int]
    on_gpu: list[bool]


# The newest workers' statics. The snapshot keeps its workers tuple while no worker row changed
# (``store.cluster_rows``), so a tick reuses them; held here, the tuple cannot be freed and its
# identity reused by another.
_statics: WorkerStatics | None = None


def worker_statics(workers: tuple[WorkerSpec, ...]) -> WorkerStatics:
    """The :class:`WorkerStatics` of ``workers``: kept from the last call for the same tuple."""
    global _statics
    kept = _statics
    if kept is not None and kept.workers is workers:
        return kept
    gpu = DeviceType.GPU
    attributes: list[dict] = []
    attribute_index: dict[tuple, int] = {}
    rows = []
    for w in workers:
        key = tuple(sorted(w.attributes.items()))
        a = attribute_index.get(key)
        if a is None:
            a = attribute_index[key] = len(attributes)
            attributes.append(dict(w.attributes))
        device = w.device
        rows.append(
            [
                w.id,
                w.cpu_millicores,
                w.memory_bytes,
                device.type.value,
                device.variant or "",
                device.count,
                a,
                w.healthy,
            ]
        )
    names = tuple(w.id for w in workers)
    kept = _statics = WorkerStatics(
        workers=workers,
        rows=rows,
        attributes=attributes,
        names=names,
        where={name: i for i, name in enumerate(names)},
        on_gpu=[w.device.type is gpu for w in workers],
    )
    return kept


# Past this share of the held workers with changed holders, a call encodes every worker afresh:
# dropping a worker's old rows and encoding its new ones costs about twice what encoding it in
# a fresh pass does (measured at 100,000 x 10,000: a second tick changing 34% of the workers
# costs the same either way). A burst's or a first tick's placements change most workers.
REENCODE_ALL_SHARE = 0.5


@dataclass(slots=True)
class HolderCodes:
    """The what-if basis's holder columns as the newest call left them, kept so the next call
    encodes only the workers whose holders changed (a churn tick changes ~1,000 of 10,000
    workers' holders; encoding all 56,000 holder rows cost ~30 ms a tick).

    ``users`` and ``kinds`` are interned in order of first appearance and grow between calls that
    encode everything afresh (a user who no longer holds anything keeps its index until then: no
    row names it); per worker,
    ``held_of`` holds the holders its rows were encoded from (compared by value with the next
    call's) and ``rows_of`` its rows (five numbers each, flat, the worker's index first);
    ``on_healthy`` is the rows of the healthy workers summed per (user, band, kind)."""

    statics: WorkerStatics
    users: list[str]
    user_index: dict[str, int]
    kinds: list[list]
    kind_index: dict[tuple[str, str, bool], int]
    # Each holder key's (user index, band, kind index), per worker variant (the kind depends on it).
    codes: dict[str, dict[tuple[str, int, str, str, bool], tuple[int, int, int]]]
    held_of: dict[str, Mapping]
    rows_of: dict[str, list[int]]
    on_healthy: dict[tuple[int, int, int], int]

    def drop(self, names: Iterable[str]) -> None:
        """Forget these workers' rows, taking their part out of ``on_healthy`` (by the workers
        of ``statics``, which encoded them)."""
        held_of, rows_of, on_healthy, workers = self.held_of, self.rows_of, self.on_healthy, self.statics.workers
        for name in names:
            if held_of.pop(name, None) is None:
                continue
            rows = rows_of.pop(name)
            if not rows or not workers[rows[0]].healthy:
                continue
            at = iter(rows)
            for _, u, band, k, n in zip(at, at, at, at, at):
                code = (u, band, k)
                left = on_healthy[code] - n
                if left:
                    on_healthy[code] = left
                else:
                    del on_healthy[code]


_holder_codes: HolderCodes | None = None


def forget() -> None:
    """Build the what-if basis's worker and holder columns afresh at the next call."""
    global _statics, _holder_codes
    _statics = None
    _holder_codes = None


def _kept_holder_codes(statics: WorkerStatics) -> HolderCodes:
    """The kept :class:`HolderCodes` for ``statics``' workers: kept whole for the same statics;
    for new statics of the same workers in the same places (a worker row changed: its spec is
    replaced in place, ``store.cluster_rows``), less the workers whose spec is another object;
    otherwise started afresh."""
    global _holder_codes
    kept = _holder_codes
    if kept is not None and kept.statics is not statics:
        before = kept.statics
        if before.names != statics.names:
            kept = None
        else:
            moved = compress(range(len(statics.workers)), map(is_not, before.workers, statics.workers))
            kept.drop([statics.names[i] for i in moved])
            kept.statics = statics
    if kept is None:
        kept = _holder_codes = HolderCodes(statics, [], {}, [], {}, {}, {}, {}, {})
    return kept


def holder_columns(
    statics: WorkerStatics, holders: Mapping[str, Mapping[tuple[str, int, str, str, bool], int]]
) -> tuple[list[str], list[list], list[int], dict[tuple[int, int, int], int]]:
    """The basis's ``users``, ``kinds``, ``holders`` (flat) and ``holders_healthy`` (as a map)
    of ``holders`` (``{worker: {holder key: active tasks}}``, not changed after the call): the
    kept columns (:class:`HolderCodes`) with the workers whose holders differ from the kept
    ones encoded again (all of them past ``REENCODE_ALL_SHARE``), so a tick pays per worker
    whose holders changed, not per holder. The decoded columns equal a fresh build's (a
    property test holds it); the interning order and the rows' order are the builder's
    business."""
    kept = _kept_holder_codes(statics)
    held_of, rows_of, on_healthy = kept.held_of, kept.rows_of, kept.on_healthy
    # The workers whose holders differ from the kept ones, and those gone. A worker given the
    # very mapping kept for it is unchanged (``LiveCounts.published`` hands out the same copy
    # while a worker's holders stay the same): told by identity, in C; the others compared by
    # value (a new copy of the same holders is unchanged too).
    names = list(holders)
    kept_held = list(map(held_of.get, names))
    other = list(compress(range(len(names)), map(is_not, holders.values(), kept_held)))
    changed = [names[i] for i in other if holders[names[i]] != kept_held[i]]
    if len(changed) > REENCODE_ALL_SHARE * len(names):
        # Everything is encoded afresh: the interned users and kinds start over too, so those
        # no row names any more (a user who holds nothing now) are not carried on for good.
        for table in (
            held_of,
            rows_of,
            on_healthy,
            kept.users,
            kept.user_index,
            kept.kinds,
            kept.kind_index,
            kept.codes,
        ):
            table.clear()
        changed = names
    else:
        kept.drop([*changed, *(held_of.keys() - holders.keys())])
    where_row, workers = statics.where, statics.workers
    users, user_index, kinds, kind_index, codes = kept.users, kept.user_index, kept.kinds, kept.kind_index, kept.codes
    cpu = DeviceType.CPU.value
    for name in changed:
        i = where_row.get(name)
        if i is None:
            continue  # not a worker of the snapshot (a Kubernetes task's node): no what-if matches it
        worker = workers[i]
        worker_variant = worker.device.variant or ""
        code_of = codes.get(worker_variant)
        if code_of is None:
            code_of = codes[worker_variant] = {}
        healthy = worker.healthy
        rows: list[int] = []
        held = held_of[name] = holders[name]
        for key, n in held.items():
            code = code_of.get(key)
            if code is None:
                user, band, dtype, variant, gang = key
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
                code = code_of[key] = (u, band, k)
            u, band, k = code
            rows += (i, u, band, k, n)
            if healthy:
                on_healthy[code] = on_healthy.get(code, 0) + n
        rows_of[name] = rows
    held_rows = list(chain.from_iterable(rows_of.values()))
    return list(users), [list(kind) for kind in kinds], held_rows, dict(on_healthy)
