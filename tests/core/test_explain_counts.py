"""The explanation's solo cause is the plain per-worker count, however it is computed.

``Explainer._compute_solo`` counts the capped workers once per candidate list and the ones short
of CPU by bisection over the list sorted by free CPU (issue 26); this holds its cause equal to
the definition: each candidate counted under the first check it fails, in check order
(assignment cap, build slots, cpu, memory, gpu, tpu), the most free among those short of a
resource, the largest count winning (the earlier check on a tie), and "room freed" as soon as
one candidate passes every check.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.explain.explainer import Explainer
from scheduler.core.explain.reasons import (
    AssignmentCapReached,
    BuildSlotsFull,
    InsufficientResource,
    RoomFreedThisTick,
)
from scheduler.core.placement import ShapeBook
from scheduler.core.pool import WorkerPool
from scheduler.core.bands import Band
from scheduler.core.types import ClusterSnapshot, Device, DeviceType, JobSpec, Resources, SchedulerConfig, WorkerSpec

MAX_ASSIGN, MAX_BUILDING = 3, 5


def plain_cause(pool: WorkerPool, shape):
    """The definition, one candidate at a time (the code before issue 26)."""
    c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
    capped = full = 0
    short: tuple[list[int], ...] = ([], [], [], [])
    for w in shape.cands:
        if pool.assigned[w] >= MAX_ASSIGN:
            capped += 1
        elif pool.building[w] >= MAX_BUILDING:
            full += 1
        elif pool.cpu[w] < c:
            short[0].append(pool.cpu[w])
        elif pool.mem[w] < m:
            short[1].append(pool.mem[w])
        elif pool.gpu[w] < g:
            short[2].append(pool.gpu[w])
        elif pool.tpu[w] < u:
            short[3].append(pool.tpu[w])
        else:
            return RoomFreedThisTick()
    blocked = [capped, full, *(len(free) for free in short)]
    best = [None, None, *(max(free, default=None) for free in short)]
    worst = max(range(6), key=lambda i: (blocked[i], -i))
    matching = len(shape.cands)
    if worst == 0:
        return AssignmentCapReached(blocked[0], matching, MAX_ASSIGN)
    if worst == 1:
        return BuildSlotsFull(blocked[1], matching, MAX_BUILDING)
    resource, need = (("cpu", c), ("memory", m), ("gpu", g), ("tpu", u))[worst - 2]
    return InsufficientResource(resource, need, best[worst], blocked[worst], matching)


# Per worker: (free cpu, free memory, free gpus, assigned this tick, building), small values so
# that ties with the request (exactly enough) are common; free gpus below zero too (an
# oversubscribed worker: a request of no GPU is short of it there, which the suffix maxima of
# free memory for such requests must not miss).
WORKER_STATE = st.tuples(
    st.integers(0, 4), st.integers(0, 4), st.integers(-1, 2), st.integers(0, MAX_ASSIGN), st.integers(0, MAX_BUILDING)
)


def pool_in(states) -> tuple[WorkerPool, ShapeBook]:
    """A pool of identical GPU workers, each set to one of ``states`` (WORKER_STATE), and its
    shape book."""
    workers = tuple(WorkerSpec(f"w{i:02d}", 4, 4, Device(DeviceType.GPU, "a100", 2)) for i in range(len(states)))
    snapshot = ClusterSnapshot(0, SchedulerConfig(0, MAX_ASSIGN, MAX_BUILDING), {}, workers, {}, ())
    pool = WorkerPool(snapshot, {}, ())
    for w, (cpu, mem, gpu, assigned, building) in enumerate(states):
        pool.cpu[w], pool.mem[w], pool.gpu[w] = cpu, mem, gpu
        pool.assigned[w], pool.building[w] = assigned, building
    return pool, ShapeBook(pool)


@settings(max_examples=300, deadline=None)
@given(
    states=st.lists(WORKER_STATE, min_size=1, max_size=12),
    requests=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=4),
)
def test_the_solo_cause_is_the_plain_count(states, requests):
    pool, book = pool_in(states)
    # Shapes of one candidate list (no constraints), asked in turn of one explainer: the list's
    # counts are shared between them.
    explainer = Explainer(pool, book)
    for k, (cpu, mem, gpu) in enumerate(requests):
        spec = JobSpec(
            f"/u/j{k}",
            "u",
            Band.INTERACTIVE,
            None,
            0,
            0,
            resources=Resources(cpu, mem, Device(DeviceType.GPU, None, gpu)),
        )
        shape = book.shape_of(spec)
        assert explainer.solo_cause(shape)[0] == plain_cause(pool, shape)


def test_requests_of_no_gpu_read_the_suffix_maxima_only_where_no_worker_is_short_of_gpus():
    """Once requests of no GPU have walked a candidate list, later ones read its suffix maxima
    of free memory; a worker left with less than no free GPU must still count as short of it
    (and one with room as room), as in the plain count."""
    for oversubscribed in (False, True):
        states = [(4, 1, 0, 0, 0), (4, 2, 0, 0, 0), (4, 4, -1 if oversubscribed else 0, 0, 0), (1, 4, 0, 0, 0)]
        pool, book = pool_in(states)
        explainer = Explainer(pool, book)
        # The first requests (no room: memory 5) walk the whole list; the later ones read the maxima.
        for k, (cpu, mem) in enumerate([(2, 5), (2, 5), (2, 3), (2, 4), (3, 3), (1, 2), (4, 4)]):
            spec = JobSpec(
                f"/u/j{k}",
                "u",
                Band.INTERACTIVE,
                None,
                0,
                0,
                resources=Resources(cpu, mem, Device(DeviceType.GPU, None, 0)),
            )
            shape = book.shape_of(spec)
            assert explainer.solo_cause(shape)[0] == plain_cause(pool, shape)
