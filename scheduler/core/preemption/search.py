"""The preemption search: for each candidate in scheduling order, the best eviction the
ordering allows (:mod:`scheduler.core.preemption.ordering`), among the victims candidate
generation indexed (:mod:`scheduler.core.preemption.candidates`); see the package for the rules.

Speed: for solo candidates, one heap per (shape, band) holds each worker's best eviction,
seeded lazily with lower bounds; an eviction or placement on a worker bumps its version and is
appended to a change log, and a heap re-examines only the workers logged since it last looked.
A candidate whose (shape, band) has nothing left to evict costs O(1). Gang searches memoise
failure per (shape, group_by, size, band) until the next eviction anywhere.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.ordering import JobQueue
from scheduler.core.placement import Shape, ShapeBook
from scheduler.core.pool import WorkerPool
from scheduler.core.preemption.candidates import (
    Slice,
    VariantKey,
    VictimGroup,
    index_victims,
    preemptor_variant,
    variant_matches,
)
from scheduler.core.preemption.ordering import host_order, single_victim_key, slice_order, victim_set_key
from scheduler.core.types import JobSpec, TaskSnapshot

# Marks an entry whose victims are not computed yet: its key is a lower bound of the worker's real
# key (the first victim it could evict at all), so the worker is examined only when the search
# reaches it. Evictions only remove victims, which only raises a worker's real key, so a lower
# bound never becomes wrong.
LOWER_BOUND = -1
# Bands whose work may preempt (everything above BATCH), by rank.
CANDIDATE_RANKS = tuple(int(b) for b in BANDS_IN_ORDER if b is not Band.BATCH)


class Eviction(NamedTuple):
    """``victim`` (stamped ``victim_band``) is evicted from worker index ``worker`` for ``preemptor``.

    A named tuple: thousands per large tick, built twice as fast as a frozen dataclass."""

    victim: TaskSnapshot
    victim_band: Band
    preemptor: TaskSnapshot
    worker: int


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    evictions: tuple[Eviction, ...] = ()
    placements: tuple[tuple[TaskSnapshot, int], ...] = ()


# A choice of victims on one worker: (group, how many of its first members).
Picks = list[tuple[VictimGroup, int]]


@dataclass(slots=True, eq=False, repr=False)
class _Feasible:
    """Shared by the searches for one (request, band, variant), which differ only in which
    workers their hard constraints allow.

    ``entries``: lower bounds of the workers where the request could be made to fit, computed
    at change-log position ``since``. ``exact``: each worker's exact entry (or None) and the
    worker version it was computed at, since it does not depend on the constraints.
    """

    entries: list
    since: int
    exact: dict[int, tuple] = field(default_factory=dict)


@dataclass(slots=True, eq=False, repr=False)
class _SquatGroups:
    """A (shape, group_by)'s groups with squatters at its first gang's search, in placement
    rank, and host -> the positions in ``groups`` of the groups holding it."""

    groups: list
    of_host: dict[int, list[int]]


@dataclass(slots=True, eq=False, repr=False)
class _SquatScan:
    """How far one gang request (shape, group_by, size, band, excluded job) got through its
    :class:`_SquatGroups`: ``live`` holds the positions, ascending, of the groups big enough
    that are not known to fail. A group that fails leaves it and comes back only once one of
    its hosts changed (the change log from ``seen`` on): whether hosts can take a gang depends
    only on them and the request. (Testing every group's version sum on every search cost
    a fifth of the squatters search: tens of thousands of groups that had not changed.)"""

    live: list[int]
    seen: int


@dataclass(slots=True, eq=False, repr=False)
class _Search:
    """The next best eviction for one (shape, band).

    ``feasible.entries`` is the shared, sorted list of lower bounds it walks; ``pos`` is how far
    this search has got. ``heap`` holds exact entries
    ``(key, worker, version, picks)`` of the workers walked so far and of workers that changed.
    ``seen`` is how far into the change log the search has looked.
    """

    feasible: _Feasible
    pos: int
    heap: list
    seen: int


class PreemptionPass:
    """One preemption pass over the candidates of one tick (mutates ``pool``)."""

    def __init__(
        self,
        pool: WorkerPool,
        book: ShapeBook,
        queues: Mapping[str, JobQueue],
        jobs: Mapping[str, JobSpec],
        active_by_job: Mapping[str, Sequence[TaskSnapshot]],
        candidates: Sequence[TaskSnapshot],
    ) -> None:
        """``candidates`` are the unplaced tasks of the bands above BATCH (BATCH work never
        preempts), in scheduling order (so bands ascend)."""
        self.pool = pool
        self.book = book
        self.queues = queues
        self.version = [0] * len(pool.ids)
        self.log: list[int] = []
        self.epoch = 0
        self.evictions: list[Eviction] = []
        self.placements: list[tuple[TaskSnapshot, int]] = []
        self._bounds: dict[tuple[int, VariantKey], list] = {}
        # (rank, variant) -> worker -> the position of its entry in ``_bounds``.
        self._bound_of: dict[tuple[int, VariantKey], dict[int, int]] = {}
        self._searches: dict[tuple, _Search] = {}
        self._search_of: dict[tuple[int, int], _Search] = {}
        self._feasible_lists: dict[tuple, _Feasible] = {}
        self._compatible: dict[tuple, list[Slice]] = {}
        self._gang_failed: dict[tuple, int] = {}
        self._slices_by_variant: dict[VariantKey, list[Slice]] = {}
        self._squat_groups: dict[tuple, _SquatGroups] = {}
        self._squat_scans: dict[tuple, _SquatScan] = {}
        self._variants_of: dict[VariantKey, frozenset[VariantKey]] = {}
        # (request, gang size, rank, excluded job) -> {a group's hosts: the sum of their versions
        # when they could not take the gang}: until one of them changes, they still cannot.
        # Whether hosts can take a gang depends only on them and the request, so gangs of other
        # shapes (constraints, group_by) with the same request share what was found.
        self._squat_failed: dict[tuple, dict[tuple[int, ...], int]] = {}
        self.candidates = candidates
        victims = index_victims(pool, queues, jobs, active_by_job, candidates)
        # Per worker, its solo victim groups in eviction order; gang slices; the jobs with victims;
        # the workers with solo victims of each variant (candidates.VictimIndex).
        self.solo = victims.solo
        self.slices = victims.slices
        self.victim_jobs = victims.victim_jobs
        self.workers_by_variant = victims.workers_by_variant
        # The workers with solo victims left (a worker leaves when its last group is evicted).
        self.squatted = {w for w, groups in self.solo.items() if groups}

    # -- the pass -----------------------------------------------------------------------------

    def run(self) -> PreemptionPlan:
        """Try every candidate in scheduling order."""
        attempted_gangs: set[str] = set()
        queues = self.queues
        for task in self.candidates:
            queue = queues[task.job_id]
            if queue.gang:
                if queue.spec.id not in attempted_gangs:
                    attempted_gangs.add(queue.spec.id)
                    self._gang(queue)
            else:
                self._solo(task, queue)
        return PreemptionPlan(tuple(self.evictions), tuple(self.placements))

    def _touch(self, w: int) -> None:
        self.version[w] += 1
        self.log.append(w)

    def _claim(self, picks: Picks, preemptor: TaskSnapshot) -> None:
        """Evict the first ``k`` members of each picked group; give back their resources."""
        pool = self.pool
        for group, k in picks:
            taken = group.members[:k]
            del group.members[:k]
            w = group.worker
            info = group.info
            pool.release(w, info.cpu * k, info.mem * k, info.gpu * k, info.tpu * k)
            band = BANDS_IN_ORDER[group.band]
            self.evictions.extend(Eviction(task, band, preemptor, w) for task in taken)
            if not group.members:
                left = self.solo[w]
                left.remove(group)
                if not left:
                    self.squatted.discard(w)

    def _place(self, task: TaskSnapshot, w: int, shape: Shape) -> None:
        self.pool.take(w, shape)
        self.placements.append((task, w))

    # -- solo ---------------------------------------------------------------------------------

    def _solo(self, task: TaskSnapshot, queue: JobQueue) -> bool:
        shape = queue.shape
        rank = int(queue.band)
        variant = preemptor_variant(shape.resources.device)
        # A job's own running tasks are off limits to it: such a job searches on its own.
        exclude = queue.spec.id if queue.spec.id in self.victim_jobs else None
        best = self._best_eviction(shape, rank, variant, exclude)
        if best is None:
            return False
        _, w, _, picks = best
        self._claim(picks, task)
        self._place(task, w, shape)
        self._touch(w)
        self.epoch += 1
        return True

    def _victim_variants(self, variant: VariantKey) -> frozenset[VariantKey]:
        """The victims' variants a candidate of ``variant`` may evict (:func:`variant_matches`),
        among those of the indexed groups (every group's variant is a key of
        ``workers_by_variant``); once per variant instead of a call per group."""
        found = self._variants_of.get(variant)
        if found is None:
            found = self._variants_of[variant] = frozenset(
                [v for v in self.workers_by_variant if variant_matches(variant, v)]
            )
        return found

    def _lower_bounds(self, rank: int, variant: VariantKey) -> list:
        """Per worker with victims a candidate of ``rank`` and ``variant`` may evict: the key of
        the first such victim, and the total (cpu, mem, gpu, tpu) all of them would free.

        Returned as entries ``(key, worker, LOWER_BOUND, totals)`` in ascending key order.
        Computed once per variant for every candidate band at the same time.
        """
        bounds = self._bounds.get((rank, variant))
        if bounds is not None:
            return bounds
        workers: set[int] = set()
        # Every group's variant is a key of workers_by_variant, so matching the keys once
        # decides the match for every group.
        matching: set[VariantKey] = set()
        for victim_variant_, members in self.workers_by_variant.items():
            if variant_matches(variant, victim_variant_):
                workers |= members
                matching.add(victim_variant_)
        every = len(matching) == len(self.workers_by_variant)
        ranks_up = tuple(reversed(CANDIDATE_RANKS))
        solo = self.solo
        # Per worker: (key, worker, [(band, totals), ...]).
        rows = []
        for w in workers:
            worker_groups = solo.get(w, ())
            groups = worker_groups if every else [g for g in worker_groups if g.variant in matching]
            if not groups:
                continue
            key = single_victim_key(groups[0])
            cpu = mem = gpu = tpu = i = 0
            n = len(groups)
            totals = []
            for r in ranks_up:
                # Groups are in band order (lowest first): extend the prefix with band > r
                # (neg_band < -r; the ``band`` property is a Python call).
                while i < n and groups[i].neg_band < -r:
                    info, k = groups[i].info, len(groups[i].members)
                    cpu += info.cpu * k
                    mem += info.mem * k
                    gpu += info.gpu * k
                    tpu += info.tpu * k
                    i += 1
                if i:
                    totals.append((r, (cpu, mem, gpu, tpu)))
            rows.append((key, w, totals))
        # A worker's key is the same in every band: one sort puts every band's entries in order
        # (instead of one sort per band of the same entries). By the key alone: keys are unique
        # (a task's), so (key, worker) sorts the same, and the row tuples' own comparison would
        # compare each pair of keys twice (equal?, then less?).
        rows.sort(key=itemgetter(0))
        per_rank: dict[int, list] = {r: [] for r in CANDIDATE_RANKS}
        for key, w, totals in rows:
            for r, free in totals:
                per_rank[r].append((key, w, LOWER_BOUND, free))
        for r, entries in per_rank.items():
            self._bounds[(r, variant)] = entries
            self._bound_of[(r, variant)] = {entry[1]: i for i, entry in enumerate(entries)}
        return self._bounds[(rank, variant)]

    def _feasible(self, shape: Shape, rank: int, variant: VariantKey) -> _Feasible:
        """The lower bounds a search for one task of ``shape``'s request in band ``rank`` walks:
        every worker with victims of ``variant`` (:meth:`_lower_bounds`), shared by every search
        with the same request, band and variant, with the exact entries they compute.

        Not filtered by whether the request could be made to fit now: the walk checks that of
        each worker it reaches, and it reaches only the workers ranked before the answer, where
        a filter up front checked every worker once per request."""
        key = (rank, variant, shape.cpu, shape.mem, shape.gpu, shape.tpu)
        cached = self._feasible_lists.get(key)
        if cached is None:
            cached = self._feasible_lists[key] = _Feasible(self._lower_bounds(rank, variant), len(self.log))
        return cached

    def _best_eviction(self, shape: Shape, rank: int, variant: VariantKey, exclude_job: str | None = None):
        """The best eviction for one task of ``shape`` in band ``rank``, or None; with
        ``exclude_job``, one that evicts no task of that job.

        Walks the feasible lower bounds only until the best exact entry found so far is no
        worse than the next bound, so a search costs work in proportion to how far down the
        ranking its evictions go. The walk re-checks feasibility, since workers change as the
        pass evicts and places (and the change log brings back workers that became feasible).
        """
        search = self._search_of.get((shape.id, rank, exclude_job))
        if search is None:
            # Soft constraints play no part in preemption, so shapes differing only in them share.
            key = (shape.cpu, shape.mem, shape.gpu, shape.tpu, shape.hard, rank, variant, exclude_job)
            search = self._searches.get(key)
            if search is None:
                feasible = self._feasible(shape, rank, variant)
                if exclude_job is not None:
                    # Leaving a job's victims out only raises a worker's best key (its first
                    # eligible victim comes no earlier; sets rank after any single victim) and
                    # only lowers what it can free: the shared lower bounds stay bounds, but the
                    # exact entries are this search's own.
                    feasible = _Feasible(feasible.entries, feasible.since)
                search = self._searches[key] = _Search(feasible, 0, [], feasible.since)
            self._search_of[(shape.id, rank, exclude_job)] = search
        members = self.book.candidate_set(shape)
        heap = search.heap
        bounds = search.feasible.entries
        if search.seen < len(self.log):
            # A worker that changed gets its original lower bound back on the heap (still a
            # valid bound); its exact entry is computed only if that bound reaches the top.
            # Not when the walk has yet to reach that bound in the list: the walk weighs the
            # worker there, as it is then (on the heap too, it was weighed twice: 6,783 of the
            # 13,577 bounds put back in a churn tick with 2,628 preemptions).
            bound_of = self._bound_of[(rank, variant)]
            pos = search.pos
            for w in members.intersection(self.log[search.seen :]):
                i = bound_of.get(w)
                if i is not None and i < pos:
                    heapq.heappush(heap, bounds[i])
            search.seen = len(self.log)
        pool = self.pool
        cpu, mem, gpu, tpu, building = pool.cpu, pool.mem, pool.gpu, pool.tpu, pool.building
        c, m, g, u, mb = shape.cpu, shape.mem, shape.gpu, shape.tpu, pool.max_building
        exact_of = search.feasible.exact
        end = len(bounds)
        version = self.version
        while True:
            pos = search.pos
            while pos < end and (not heap or bounds[pos][0] < heap[0][0]):
                _, w, _, (fc, fm, fg, ft) = bounds[pos]
                pos += 1
                if (
                    w in members
                    and building[w] < mb
                    and (cpu[w] < c or mem[w] < m or gpu[w] < g or tpu[w] < u)
                    and cpu[w] + fc >= c
                    and mem[w] + fm >= m
                    and gpu[w] + fg >= g
                    and tpu[w] + ft >= u
                ):
                    search.pos = pos
                    exact = self._shared_entry(exact_of, w, shape, rank, variant, exclude_job)
                    if exact is not None:
                        heapq.heappush(heap, exact)
            search.pos = pos
            if not heap:
                return None
            entry = heapq.heappop(heap)
            if entry[2] == LOWER_BOUND:
                exact = self._shared_entry(exact_of, entry[1], shape, rank, variant, exclude_job)
                if exact is not None:
                    heapq.heappush(heap, exact)
            elif entry[2] == version[entry[1]]:
                return entry

    def _shared_entry(
        self, cache: dict[int, tuple], w: int, shape: Shape, rank: int, variant: VariantKey, exclude_job: str | None
    ):
        """:meth:`_solo_entry`, remembered per worker version in ``cache``."""
        version = self.version[w]
        cached = cache.get(w)
        if cached is not None and cached[0] == version:
            return cached[1]
        entry = self._solo_entry(w, shape, rank, variant, exclude_job)
        cache[w] = (version, entry)
        return entry

    def _solo_entry(self, w: int, shape: Shape, rank: int, variant: VariantKey, exclude_job: str | None = None):
        """Worker ``w``'s best eviction for one task of ``shape`` in band ``rank``, or None.

        The key orders single victims by (lowest band, cheapest, job id, index) ahead of any
        set of several, and sets by (size, total value, worker id).
        """
        pool = self.pool
        if not pool.has_build_slot(w) or pool.has_room(w, shape):
            return None
        picks = self._victim_set(w, shape, rank, variant, exclude_job, any_variant=False)
        if picks is None:
            return None
        if len(picks) == 1 and picks[0][1] == 1:
            key = single_victim_key(picks[0][0])
        else:
            key = victim_set_key(picks, pool.rank[w])
        return (key, w, self.version[w], picks)

    def _victim_set(
        self,
        w: int,
        shape: Shape,
        rank: int,
        variant: VariantKey,
        exclude_job: str | None,
        any_variant: bool,
    ) -> Picks | None:
        """The victims on ``w`` whose eviction lets one task of ``shape`` fit, or None.

        The first single victim in (lowest band, cheapest) order that is enough; else victims
        added one by one in that order until the task fits, then every victim the fit does not
        need dropped again, last added first (so cheaper, lower-band victims are kept). Members
        of a group are identical, so both steps work on counts per group.
        """
        pool = self.pool
        # Remaining deficit per resource (<= 0: covered).
        dc = shape.cpu - pool.cpu[w]
        dm = shape.mem - pool.mem[w]
        dg = shape.gpu - pool.gpu[w]
        dt = shape.tpu - pool.tpu[w]
        # One pass finds the eligible groups and, among them, the first single victim enough.
        eligible = []
        neg_rank = -rank
        variants = None if any_variant else self._victim_variants(variant)
        for group in self.solo.get(w, ()):
            if group.neg_band >= neg_rank:  # band <= rank, without the property call
                break
            if (variants is None or group.variant in variants) and group.job_id != exclude_job:
                i = group.info
                if i.cpu >= dc and i.mem >= dm and i.gpu >= dg and i.tpu >= dt:
                    return [(group, 1)]
                eligible.append(group)
        if not eligible:
            return None
        picks: Picks = []
        for group in eligible:
            i = group.info
            take = len(group.members)
            # As many as the largest deficit needs; all of them if one is of a resource the
            # group does not hold.
            if not (
                (dc > 0 and i.cpu <= 0) or (dm > 0 and i.mem <= 0) or (dg > 0 and i.gpu <= 0) or (dt > 0 and i.tpu <= 0)
            ):
                enough = 0
                if dc > 0:
                    enough = -(-dc // i.cpu)
                if dm > 0:
                    enough = max(enough, -(-dm // i.mem))
                if dg > 0:
                    enough = max(enough, -(-dg // i.gpu))
                if dt > 0:
                    enough = max(enough, -(-dt // i.tpu))
                take = min(take, enough)
            picks.append((group, take))
            dc -= i.cpu * take
            dm -= i.mem * take
            dg -= i.gpu * take
            dt -= i.tpu * take
            if dc <= 0 and dm <= 0 and dg <= 0 and dt <= 0:
                break
        else:
            return None
        kept: Picks = []
        for group, take in reversed(picks):
            i = group.info
            drop = take
            if i.cpu > 0:
                drop = min(drop, -dc // i.cpu)
            if i.mem > 0:
                drop = min(drop, -dm // i.mem)
            if i.gpu > 0:
                drop = min(drop, -dg // i.gpu)
            if i.tpu > 0:
                drop = min(drop, -dt // i.tpu)
            if drop:
                dc += i.cpu * drop
                dm += i.mem * drop
                dg += i.gpu * drop
                dt += i.tpu * drop
            if take - drop:
                kept.append((group, take - drop))
        kept.reverse()
        return kept

    # -- gangs --------------------------------------------------------------------------------

    def _gang(self, queue: JobQueue) -> bool:
        shape = queue.shape
        rank = int(queue.band)
        n = len(queue.passed)
        group_by = queue.spec.group_by
        own = queue.spec.id
        memo = None if own in self.victim_jobs else (shape.id, group_by, n, rank)
        if memo is not None and self._gang_failed.get(memo) == self.epoch:
            return False
        variant = preemptor_variant(shape.resources.device)
        if variant is not None and self._evict_slice(queue, shape, rank, variant):
            return True
        if self._evict_squatters(queue, shape, rank):
            return True
        if memo is not None:
            self._gang_failed[memo] = self.epoch
        return False

    def _slices_for(self, variant: VariantKey) -> list[Slice]:
        """Slices a gang of ``variant`` may evict, lowest band first, then cheapest."""
        slices = self._slices_by_variant.get(variant)
        if slices is None:
            slices = [s for s in self.slices.values() if s.variant is not None and variant_matches(variant, s.variant)]
            slices.sort(key=slice_order)
            self._slices_by_variant[variant] = slices
        return slices

    def _evict_slice(self, queue: JobQueue, shape: Shape, rank: int, variant: VariantKey) -> bool:
        tasks = queue.passed
        n = len(tasks)
        pool = self.pool
        # By shape id: hashing the shape's constraints on every gang cost more than the list.
        key = (shape.id, n, variant)
        compatible = self._compatible.get(key)
        if compatible is None:
            # Slices the gang could ever take: big enough, on healthy hosts it may use.
            allowed = self.book.candidate_set(shape)
            compatible = self._compatible[key] = [
                piece
                for piece in self._slices_for(variant)
                if len(piece.members) >= n and piece.usable and all(m.worker in allowed for m in piece.members)
            ]
        for piece in compatible:
            if piece.claimed:
                continue
            if piece.max_band <= rank:
                break
            members = piece.members
            if piece.min_band <= rank or piece.job_id == queue.spec.id:
                continue
            info = piece.info
            on_host: dict[int, int] = {}
            for m in members:
                on_host[m.worker] = on_host.get(m.worker, 0) + 1
            by_value: dict[str, list[int]] = {}
            for w in on_host:
                value = pool.attrs[w].get(queue.spec.group_by)
                if value is not None:
                    by_value.setdefault(value, []).append(w)
            for value in sorted(by_value):
                hosts = sorted(by_value[value], key=self.book.host_order)
                fitting = [
                    w
                    for w in hosts
                    if pool.has_build_slot(w)
                    and pool.cpu[w] + info.cpu * on_host[w] >= shape.cpu
                    and pool.mem[w] + info.mem * on_host[w] >= shape.mem
                    and pool.gpu[w] + info.gpu * on_host[w] >= shape.gpu
                    and pool.tpu[w] + info.tpu * on_host[w] >= shape.tpu
                ]
                if len(fitting) < n:
                    continue
                piece.claimed = True
                placed_on = dict(zip(fitting, tasks))
                for m in sorted(members, key=lambda m: m.task.index):
                    pool.release(m.worker, info.cpu, info.mem, info.gpu, info.tpu)
                    preemptor = placed_on.get(m.worker, tasks[0])
                    self.evictions.append(Eviction(m.task, BANDS_IN_ORDER[m.band], preemptor, m.worker))
                for w, task in placed_on.items():
                    self._place(task, w, shape)
                for w in set(on_host) | set(placed_on):
                    self._touch(w)
                self.epoch += 1
                return True
        return False

    def _evict_squatters(self, queue: JobQueue, shape: Shape, rank: int) -> bool:
        """Free the hosts of one group that the gang needs by evicting lower-band solo tasks.

        Only groups with squatters at the start of the pass can help (squatters only go away).
        Within the first group (in placement rank) that works, the hosts that fit already are
        used and the cheapest recoverable hosts, by (victims, value), make up the rest. When a
        group could take the gang without evicting anything, nothing is evicted: the gang is
        placed by the next tick.
        """
        tasks = queue.passed
        n = len(tasks)
        group_by = queue.spec.group_by
        squat = self._squat_groups.get((shape.id, group_by))
        if squat is None:
            squatted = self.squatted
            groups = [g for g in self.book.groups(shape, group_by) if not squatted.isdisjoint(g.members)]
            of_host: dict[int, list[int]] = {}
            for i, g in enumerate(groups):
                for w in g.members:
                    of_host.setdefault(w, []).append(i)
            squat = self._squat_groups[(shape.id, group_by)] = _SquatGroups(groups, of_host)
        groups = squat.groups
        own = queue.spec.id
        excluded = own if own in self.victim_jobs else None
        log = self.log
        scan = self._squat_scans.get((shape.id, group_by, n, rank, excluded))
        if scan is None:
            live = [i for i, g in enumerate(groups) if len(g.members) >= n]
            scan = self._squat_scans[(shape.id, group_by, n, rank, excluded)] = _SquatScan(live, len(log))
        elif scan.seen < len(log):
            # The groups holding a host that changed since are back in the running.
            back = {i for w in set(log[scan.seen :]) for i in squat.of_host.get(w, ()) if len(groups[i].members) >= n}
            if back:
                scan.live = sorted(back.union(scan.live))
            scan.seen = len(log)
        pool = self.pool
        failed = self._squat_failed.setdefault((shape.cpu, shape.mem, shape.gpu, shape.tpu, n, rank, excluded), {})
        version = self.version
        cpu, mem, gpu, tpu, building = pool.cpu, pool.mem, pool.gpu, pool.tpu, pool.building
        rc, rm, rg, rt, mb = shape.cpu, shape.mem, shape.gpu, shape.tpu, pool.max_building
        live = scan.live
        # Every group before the one a search stops at failed: it leaves ``live`` with them.
        for j, i in enumerate(live):
            members = groups[i].members
            # Versions only grow, so their sum changes exactly when one of the hosts changed.
            # (Another shape with the same request may have found these hosts failing.)
            stamp = sum(map(version.__getitem__, members))
            if failed.get(members) == stamp:
                continue
            fitting: list[tuple[int, int]] = []
            recoverable = []
            for position, w in enumerate(members):
                if building[w] >= mb:
                    continue
                if cpu[w] >= rc and mem[w] >= rm and gpu[w] >= rg and tpu[w] >= rt:
                    fitting.append((position, w))
                    continue
                picks = self._victim_set(w, shape, rank, None, own, any_variant=True)
                if picks is not None:
                    count = sum(k for _, k in picks)
                    value = sum(g.value * k for g, k in picks)
                    recoverable.append((count, value, position, w, picks))
            needed = n - len(fitting)
            if needed <= 0:
                scan.live = live[j:]
                return False
            if len(recoverable) < needed:
                failed[members] = stamp
                continue
            scan.live = live[j:]
            recoverable.sort(key=host_order)
            chosen = recoverable[:needed]
            hosts = sorted(fitting + [(r[2], r[3]) for r in chosen])
            placed_on = {w: task for (_, w), task in zip(hosts, tasks)}
            for _, _, _, w, picks in chosen:
                self._claim(picks, placed_on[w])
            for w, task in placed_on.items():
                self._place(task, w, shape)
                self._touch(w)
            self.epoch += 1
            return True
        scan.live = []
        return False
