"""Fitting tasks and gangs onto workers, band by band.

Within a band, gangs go first (all-or-nothing inside one ``group_by`` group), then solo tasks
first-fit in scheduling order. Doing this per band, rather than every gang of every band before
any solo task as Iris does, means a BATCH gang can never take a host an INTERACTIVE task needed.

Speed comes from two facts that hold during one placement pass: capacity only shrinks and the
per-worker counts only grow. So a worker that cannot fit a request now never fits it later in
the pass. Every distinct request (*shape*: resources plus constraints) keeps one first-fit cursor
into its sorted candidate list, shared by all jobs with that shape, and a gang shape keeps one
cursor into its group list. The whole pass costs O(shapes × workers + tasks) instead of
O(tasks × workers). Shapes whose constraints allow the same workers share one candidate list,
and the cursors of a list start at its shared floor (:class:`Lane`): the workers before it can
take no task of any of those shapes. The preemption pass frees capacity and therefore does not
use the cursors.

Worker indices (positions in ``ClusterSnapshot.workers``) are used in place of ids throughout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import chain
from operator import and_, itemgetter, or_

from scheduler.core.bands import Band
from scheduler.core.ordering import JobQueue
from scheduler.core.constraints import (
    DEVICE_VARIANT_KEY,
    filter_workers,
    hard_constraints,
    request_tuple,
    soft_constraints,
)
from scheduler.core.pool import WorkerPool
from scheduler.core.rankmask import by_score, everyone, mask_of, masks_by_value, workers_in
from scheduler.core.types import (
    ANY_VARIANT,
    Constraint,
    ConstraintOp,
    JobSpec,
    Resources,
    TaskSnapshot,
)

# Hosts of a gang group are used in this attribute's order (numeric when it parses).
TPU_WORKER_ID_KEY = "tpu-worker-id"


@dataclass(slots=True, eq=False, repr=False)
class Shape:
    """A distinct request: per-task resources and the healthy workers its hard constraints allow.

    ``cands`` is sorted by soft-constraint score (descending), then worker id. ``pos`` is the
    first-fit cursor: every candidate before it failed to fit this shape earlier in the
    placement pass.
    """

    id: int
    cpu: int
    mem: int
    gpu: int
    tpu: int
    resources: Resources
    hard: tuple[Constraint, ...]
    soft: tuple[Constraint, ...]
    cands: list[int]
    pos: int = 0
    # The placement pass's shared floor of ``cands`` (set by :func:`place`).
    lane: Lane | None = None
    # (cpu, mem, gpu, tpu) as one tuple, and how many candidates: the placement pass reads
    # them once per task.
    request: tuple[int, int, int, int] = field(init=False)
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.request = (self.cpu, self.mem, self.gpu, self.tpu)
        self.size = len(self.cands)


@dataclass(slots=True, eq=False, repr=False)
class Lane:
    """What the shapes sharing one candidate list share during one placement pass.

    ``cpu``/``mem``/``gpu``/``tpu`` are the smallest request among those shapes. A candidate
    at its assignment or build cap, or short of one of those smallest amounts, can take no task
    of any of them for the rest of the pass (capacity only shrinks, counts only grow). First-fit
    fills the front of a list first, so such workers gather before ``floor``: every candidate
    before it is such a worker, and every cursor of the list starts at the floor at the latest.
    Without it each shape walked the same full workers again: at 100k pending x 10k workers
    four in five of the cursors' steps were over workers no shape could use.
    """

    cpu: int
    mem: int
    gpu: int
    tpu: int
    floor: int = 0
    # (cpu, mem, gpu, tpu) as one tuple, set once the lane's shapes are all in (:func:`lanes_of`).
    smallest: tuple[int, int, int, int] = field(init=False)


def lanes_of(shapes: Iterable[Shape]) -> None:
    """Give every shape the lane of its candidate list (shapes whose constraints allow the
    same workers share the list object, :meth:`ShapeBook.candidates`), fresh for one
    placement pass."""
    lanes: dict[int, Lane] = {}
    for shape in shapes:
        lane = lanes.get(id(shape.cands))
        if lane is None:
            lane = lanes[id(shape.cands)] = Lane(shape.cpu, shape.mem, shape.gpu, shape.tpu)
        else:
            lane.cpu = min(lane.cpu, shape.cpu)
            lane.mem = min(lane.mem, shape.mem)
            lane.gpu = min(lane.gpu, shape.gpu)
            lane.tpu = min(lane.tpu, shape.tpu)
        shape.lane = lane
    for lane in lanes.values():
        lane.smallest = (lane.cpu, lane.mem, lane.gpu, lane.tpu)


@dataclass(frozen=True, slots=True)
class Group:
    """Workers sharing one value of a gang's ``group_by`` attribute, in ``tpu-worker-id`` order."""

    value: str
    members: tuple[int, ...]


class ShapeBook:
    """Memoised shapes, candidate lists and gang groups for one tick."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self._by_request: dict[tuple, Shape] = {}
        # (id(resources), id(constraints)) of a job -> its shape (the first key of shape_of).
        self.shapes_by_identity: dict[tuple[int, int], Shape] = {}
        self._candidates: dict[tuple, list[int]] = {}
        # (id(candidate list), group_by) -> the ranked groups (the list identifies the shapes'
        # matching workers and soft constraints, and the book keeps it alive).
        self._groups: dict[tuple[int, str], list[Group]] = {}
        # group_by -> value -> the group of every healthy worker with that value.
        self._whole: dict[str, dict[str, Group]] = {}
        # (shape id, group_by) -> the same lists: hashing a shape's constraints on every
        # gang's look-up cost more than building the groups.
        self._groups_of_shape: dict[tuple[int, str], list[Group]] = {}
        self._shared_groups: dict[tuple[str, tuple[int, ...]], Group] = {}
        # id(candidate list) -> its workers as a set (shapes sharing a list share it).
        self._candidate_sets: dict[int, frozenset[int]] = {}
        # Sets of healthy workers are rank masks (``core.rankmask``).
        self._ranks = len(pool.by_id)
        self._everyone = everyone(self._ranks)
        self._postings: dict[str, dict[str, int]] = {}
        # Constraint -> the mask of the healthy workers it allows.
        self._matching_sets: dict[Constraint, int] = {}
        # Constraint -> the same workers as a set (gang groups' soft scores).
        self._matching_worker_sets: dict[Constraint, frozenset[int]] = {}
        # (key, values) of an ``in`` -> the union of the values' posting masks: constraints
        # listing the same values in another order allow the same workers.
        self._unions: dict[tuple[str, frozenset[str]], int] = {}
        # The identities of a signature's matching masks (each kept alive by the memos above)
        # -> their intersection.
        self._intersections: dict[tuple[int, ...], int] = {}
        # (matching mask or None for all, soft constraints) -> the candidate list.
        self._by_matching: dict[tuple[int | None, tuple[Constraint, ...]], list[int]] = {}
        self.shapes: list[Shape] = []
        self.gang_cursor: dict[tuple, int] = {}
        self._host_keys: dict[int, tuple[int, int, str, int]] = {}

    def shape_of(self, job: JobSpec) -> Shape:
        """The shared shape of a job's tasks (one per distinct resources and constraints)."""
        # Snapshots share Resources and constraint tuples between jobs, and the snapshot keeps
        # them alive for the whole decision, so identity is a valid (and much cheaper) first key.
        same = (id(job.resources), id(job.constraints))
        shape = self.shapes_by_identity.get(same)
        if shape is not None:
            return shape
        key = (job.resources, job.constraints)
        shape = self._by_request.get(key)
        if shape is None:
            hard = hard_constraints(job)
            soft = soft_constraints(job)
            cpu, mem, gpu, tpu = request_tuple(job.resources)
            shape = Shape(len(self.shapes), cpu, mem, gpu, tpu, job.resources, hard, soft, self.candidates(hard, soft))
            self.shapes.append(shape)
            self._by_request[key] = shape
        self.shapes_by_identity[same] = shape
        return shape

    def candidates(self, hard: tuple[Constraint, ...], soft: tuple[Constraint, ...]) -> list[int]:
        """Healthy workers matching every hard constraint, best soft score first, then by id.

        Different constraints often allow the same workers (a zone and the region holding only
        it): such signatures share one list object, built once, and so share the placement
        pass's lane (:class:`Lane`) and the explanation's counts."""
        key = (hard, soft)
        cands = self._candidates.get(key)
        if cands is not None:
            return cands
        # Each constraint's matching workers are one mask built once per tick; a signature
        # intersects them instead of filtering a list per constraint. None: no hard
        # constraint, every healthy worker.
        matching = None
        if hard:
            masks = [self._matching(c) for c in hard]
            # Signatures whose constraints allow the same sets (an ``in`` listing its zones in
            # another order, a soft preference added) intersect them once.
            same = tuple(sorted(map(id, masks)))
            matching = self._intersections.get(same)
            if matching is None:
                matching = self._intersections[same] = reduce(and_, masks)
        cands = self._by_matching.get((matching, soft))
        if cands is None:
            # Best soft score first, each score's workers in id order.
            levels = by_score(self._everyone if matching is None else matching, map(self._matching, soft))
            by_id = self.pool.by_id
            cands = list(chain.from_iterable(workers_in(level, by_id) for level in reversed(levels)))
            self._by_matching[(matching, soft)] = cands
        self._candidates[key] = cands
        return cands

    def candidate_set(self, shape: Shape) -> frozenset[int]:
        """``shape.cands`` as a set, built once per candidate list."""
        return self._candidate_set(shape.cands)

    def _candidate_set(self, cands: list[int]) -> frozenset[int]:
        found = self._candidate_sets.get(id(cands))
        if found is None:
            found = self._candidate_sets[id(cands)] = frozenset(cands)
        return found

    def _matching(self, c: Constraint) -> int:
        """The rank mask of the healthy workers satisfying ``c`` (memoised): from the posting
        masks for ``eq``, ``in`` and ``ne``, by one pass of :func:`filter_workers` otherwise."""
        matching = self._matching_sets.get(c)
        if matching is None:
            key, value, op = c.key, c.value, c.op
            any_variant = key == DEVICE_VARIANT_KEY and (
                value == ANY_VARIANT or (op is ConstraintOp.IN and ANY_VARIANT in value)
            )
            if any_variant or op not in (ConstraintOp.EQ, ConstraintOp.IN, ConstraintOp.NE):
                rank = self.pool.rank
                matching = mask_of([rank[w] for w in filter_workers(self.pool.by_id, self.pool.attrs, c)], self._ranks)
            else:
                posting = self._posting(key)
                values = value if op is ConstraintOp.IN else (value,)
                # One value (``eq``, ``ne``, a one-value ``in``) is its posting mask itself.
                found = [posting[v] for v in values if v in posting]
                if len(found) == 1:
                    matching = found[0]
                else:
                    union_key = (key, frozenset(values))
                    matching = self._unions.get(union_key)
                    if matching is None:
                        matching = self._unions[union_key] = reduce(or_, found, 0)
                if op is ConstraintOp.NE:
                    matching = self._everyone ^ matching
            self._matching_sets[c] = matching
        return matching

    def _matching_workers(self, c: Constraint) -> frozenset[int]:
        """The healthy workers satisfying ``c``, as a set (memoised)."""
        found = self._matching_worker_sets.get(c)
        if found is None:
            found = self._matching_worker_sets[c] = frozenset(workers_in(self._matching(c), self.pool.by_id))
        return found

    def _posting(self, key: str) -> dict[str, int]:
        """Attribute ``key``'s value -> the rank mask of the healthy workers with that value."""
        posting = self._postings.get(key)
        if posting is None:
            attrs = self.pool.attrs
            posting = self._postings[key] = masks_by_value([attrs[w].get(key) for w in self.pool.by_id])
        return posting

    def groups(self, shape: Shape, group_by: str) -> list[Group]:
        """The shape's candidates grouped by ``group_by``, ranked for gang placement.

        Groups go by total soft-constraint score (descending), then group value; workers
        without the attribute belong to no group. Members are in ``tpu-worker-id`` order.
        Shapes sharing a candidate list (the same matching workers and soft constraints,
        :meth:`candidates`) share the result.
        """
        groups = self._groups_of_shape.get((shape.id, group_by))
        if groups is not None:
            return groups
        key = (id(shape.cands), group_by)
        groups = self._groups.get(key)
        if groups is None:
            groups = self._groups[key] = self._group(shape.cands, shape.soft, group_by)
        self._groups_of_shape[(shape.id, group_by)] = groups
        return groups

    def _group(self, cands: list[int], soft: tuple[Constraint, ...], group_by: str) -> list[Group]:
        # Each group of every healthy worker with one value (members in host order) is kept
        # whole when the candidates hold all of it (the usual case: constraints select whole
        # slices), as the candidates among its members otherwise: two set tests per group, not
        # a look-up per candidate, and no sort.
        allowed = self._candidate_set(cands)
        chosen: dict[str, Group] = {}
        for value, group in self._whole_groups(group_by).items():
            if allowed.issuperset(group.members):
                chosen[value] = group
            elif not allowed.isdisjoint(group.members):
                chosen[value] = self._shared_group(value, tuple([w for w in group.members if w in allowed]))
        if not soft:
            return [group for _, group in sorted(chosen.items())]
        # A group's score: how many (member, soft constraint) pairs match.
        matching = [self._matching_workers(c) for c in soft]
        scored = [
            (-sum([len(workers.intersection(group.members)) for workers in matching]), value, group)
            for value, group in chosen.items()
        ]
        scored.sort(key=itemgetter(0, 1))  # (-score, value): values are distinct
        return [group for _, _, group in scored]

    def _whole_groups(self, group_by: str) -> dict[str, Group]:
        """Value of ``group_by`` -> the group of every healthy worker with that value (once per
        attribute)."""
        whole = self._whole.get(group_by)
        if whole is None:
            attrs = self.pool.attrs
            by_value: dict[str, list[int]] = {}
            for w in self.pool.by_id:
                value = attrs[w].get(group_by)
                if value is not None:
                    by_value.setdefault(value, []).append(w)
            whole = self._whole[group_by] = {}
            for value, members in by_value.items():
                members.sort(key=self.host_order)
                whole[value] = self._shared_group(value, tuple(members))
        return whole

    def _shared_group(self, value: str, hosts: tuple[int, ...]) -> Group:
        """One object per distinct group (shapes see thousands of the same groups per tick)."""
        group = self._shared_groups.get((value, hosts))
        if group is None:
            group = self._shared_groups[(value, hosts)] = Group(value, hosts)
        return group

    def host_order(self, w: int) -> tuple[int, int, str, int]:
        """Sort key of a host inside a gang group: ``tpu-worker-id`` numerically when it parses,
        else as text, hosts without it last; then worker id."""
        key = self._host_keys.get(w)
        if key is None:
            raw = self.pool.attrs[w].get(TPU_WORKER_ID_KEY)
            rank = self.pool.rank[w]
            if raw is None:
                key = (2, 0, "", rank)
            else:
                try:
                    key = (0, int(raw), "", rank)
                except ValueError:
                    key = (1, 0, raw, rank)
            self._host_keys[w] = key
        return key


@dataclass(slots=True, eq=False, repr=False)
class Placed:
    """What the placement pass did.

    ``tasks``: (task, worker index) of every task it placed, in placement order. ``waiting``:
    per band, the tasks that passed the gates and were not placed, in scheduling order, and
    ``positions``: each one's position in the whole scheduling order (all bands, 0-based). The
    preemption pass takes its candidates from ``waiting`` and the explanations walk it, so
    neither walks the whole order again. ``ends``: per band (in order), where its placements
    end in ``tasks`` (bands are placed one after the other).
    """

    tasks: list[tuple[TaskSnapshot, int]]
    waiting: dict[Band, list[TaskSnapshot]]
    positions: dict[Band, list[int]]
    ends: dict[Band, int]


def place(
    bands: Mapping[Band, Sequence[TaskSnapshot]],
    gangs: Mapping[Band, Sequence[JobQueue]],
    queues: Mapping[str, JobQueue],
    pool: WorkerPool,
    book: ShapeBook,
) -> Placed:
    """Place the ordered tasks band by band.

    Within a band: gangs in order of their first task (``gangs``, from
    :func:`ordering.scheduling_order`), each all-or-nothing; then solo tasks first-fit. Once a
    task of a solo job finds no worker, the job's ``failed_task`` is set and its later tasks
    wait (other jobs go on: no head-of-line blocking); a gang that finds no group gets its
    first task as ``failed_task``.
    """
    out: list[tuple[TaskSnapshot, int]] = []
    waiting: dict[Band, list[TaskSnapshot]] = {}
    positions: dict[Band, list[int]] = {}
    ends: dict[Band, int] = {}
    cpu, mem, gpu, tpu = pool.cpu, pool.mem, pool.gpu, pool.tpu
    assigned, building = pool.assigned, pool.building
    max_assign, max_building = pool.max_assign, pool.max_building
    # Every shape a queue walks with is in the book; shapes only gangs use lower their lane's
    # smallest request, which only keeps the floor lower.
    lanes_of(book.shapes)
    first = 0  # the position of the band's first task in the whole order
    for band, tasks in bands.items():
        for queue in gangs.get(band, ()):
            if not place_gang(queue, pool, book, out):
                queue.failed_task = queue.passed[0].id
        waiting[band], positions[band] = [], []
        wait, at = waiting[band].append, positions[band].append
        for position, task in enumerate(tasks, first):
            queue = queues[task.job_id]
            if queue.failed_task is not None:
                wait(task)
                at(position)
                continue
            if queue.gang:
                continue
            shape = queue.shape
            cands = shape.cands
            n = shape.size
            start = shape.pos
            lane = shape.lane
            if start <= lane.floor:
                # At or behind the lane's floor: start there, and first move the floor past
                # the workers no shape of the lane can use any more (see Lane).
                start = lane.floor
                lc, lm, lg, lu = lane.smallest
                while start < n:
                    w = cands[start]
                    # In the order that most often decides first (the assignment cap, then
                    # CPU, on the large mixes); build slots last, they rarely run out first.
                    if (
                        assigned[w] >= max_assign
                        or cpu[w] < lc
                        or mem[w] < lm
                        or gpu[w] < lg
                        or tpu[w] < lu
                        or building[w] >= max_building
                    ):
                        start += 1
                    else:
                        break
                lane.floor = start
            c, m, g, u = shape.request
            # The cursors walk hundreds of thousands of candidates per pass: a ``for`` over
            # the positions, and free CPU (what most often rules a worker out) tested first.
            for p in range(start, n):
                w = cands[p]
                if (
                    cpu[w] >= c
                    and assigned[w] < max_assign
                    and mem[w] >= m
                    and gpu[w] >= g
                    and tpu[w] >= u
                    and building[w] < max_building
                ):
                    break
            else:
                shape.pos = n
                queue.failed_task = task.id
                wait(task)
                at(position)
                continue
            shape.pos = p
            cpu[w] -= c
            mem[w] -= m
            # Most shapes ask for no GPU or no TPU: skipping a zero is a test instead of a
            # read, a subtraction and a store, for most of the tens of thousands placed.
            if g:
                gpu[w] -= g
            if u:
                tpu[w] -= u
            assigned[w] += 1
            building[w] += 1
            out.append((task, w))
        first += len(tasks)
        ends[band] = len(out)
    return Placed(out, waiting, positions, ends)


def place_gang(queue: JobQueue, pool: WorkerPool, book: ShapeBook, out: list[tuple[TaskSnapshot, int]]) -> bool:
    """Place all of a gang's passed tasks inside one group, or none of them.

    The first group (in rank order) with at least as many fitting hosts as tasks wins; the
    hosts are taken in ``tpu-worker-id`` order and zipped with the tasks by index. Per-worker
    caps apply to gangs as to any placement. A group that fails a shape for ``n`` tasks cannot
    succeed later in the pass, so the cursor per (shape, group_by, n) only moves forward.
    """
    shape = queue.shape
    tasks = queue.passed
    n = len(tasks)
    group_by = queue.spec.group_by
    groups = book.groups(shape, group_by)
    key = (shape.id, group_by, n)
    gi = book.gang_cursor.get(key, 0)
    cpu, mem, gpu, tpu = pool.cpu, pool.mem, pool.gpu, pool.tpu
    assigned, building = pool.assigned, pool.building
    max_assign, max_building = pool.max_assign, pool.max_building
    c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
    while gi < len(groups):
        members = groups[gi].members
        if len(members) >= n:
            fitting = [
                w
                for w in members
                if assigned[w] < max_assign
                and building[w] < max_building
                and cpu[w] >= c
                and mem[w] >= m
                and gpu[w] >= g
                and tpu[w] >= u
            ]
            if len(fitting) >= n:
                book.gang_cursor[key] = gi
                for task, w in zip(tasks, fitting):
                    pool.take(w, shape)
                    out.append((task, w))
                return True
        gi += 1
    book.gang_cursor[key] = gi
    return False
