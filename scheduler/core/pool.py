"""The workers' free capacity and per-worker counts during one decision (:class:`WorkerPool`).

Worker indices (positions in ``ClusterSnapshot.workers``) are used in place of ids throughout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from scheduler.core.constraints import request_tuple, worker_attributes
from scheduler.core.types import CapacityLeft, ClusterSnapshot, DeviceType, TaskSnapshot, TaskState


class Shape(Protocol):
    """What the pool reads of a request (``placement.Shape``): one task's resources."""

    cpu: int
    mem: int
    gpu: int
    tpu: int


# A cap configured as 0 means unlimited; internally it is this (larger than any count).
UNLIMITED = sys.maxsize


class WorkerPool:
    """Free capacity and per-worker counts of every worker, mutated as work is placed.

    ``cpu``/``mem``/``gpu``/``tpu`` hold what is free: total minus the requests of tasks active
    on the worker and of earlier attempts not yet confirmed finished there. ``building`` counts
    ASSIGNED and BUILDING tasks, ``assigned`` the assignments made this tick. Only healthy
    workers are placement targets (``by_id`` lists them in id order); ``rank`` is a worker's
    position in that order, the final tie-break everywhere. The ``start_*`` lists keep the
    capacity at tick start for explanations.
    """

    __slots__ = (
        "ids",
        "index",
        "healthy",
        "attrs",
        "variant",
        "cpu",
        "mem",
        "gpu",
        "tpu",
        "building",
        "assigned",
        "max_building",
        "max_assign",
        "by_id",
        "rank",
        "start_cpu",
        "start_mem",
        "start_gpu",
        "start_tpu",
        "start_building",
    )

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        active_by_job: Mapping[str, Sequence[TaskSnapshot]],
        unfinished: Iterable[TaskSnapshot],
    ) -> None:
        workers = snapshot.workers
        self.ids = [w.id for w in workers]
        self.index = {w.id: i for i, w in enumerate(workers)}
        self.healthy = [w.healthy for w in workers]
        self.variant = [w.device.variant for w in workers]
        self.attrs = [worker_attributes(w.attributes, w.device.type, w.device.variant) for w in workers]
        self.cpu = [w.cpu_millicores for w in workers]
        self.mem = [w.memory_bytes for w in workers]
        gpu_type, tpu_type = DeviceType.GPU, DeviceType.TPU  # enum lookups are slow in loops
        self.gpu = [w.device.count if w.device.type is gpu_type else 0 for w in workers]
        self.tpu = [w.device.count if w.device.type is tpu_type else 0 for w in workers]
        self.building = [0] * len(workers)
        self.assigned = [0] * len(workers)
        config = snapshot.config
        self.max_building = config.max_building_tasks or UNLIMITED
        self.max_assign = config.max_assignments_per_worker or UNLIMITED
        self.by_id = sorted((i for i in range(len(workers)) if workers[i].healthy), key=self.ids.__getitem__)
        self.rank = [UNLIMITED] * len(workers)
        for position, i in enumerate(self.by_id):
            self.rank[i] = position

        jobs = snapshot.jobs
        index = self.index
        running = TaskState.RUNNING
        cpu, mem, gpu, tpu, building = self.cpu, self.mem, self.gpu, self.tpu, self.building
        # Keyed by identity: jobs share Resources objects, and the snapshot keeps them alive.
        requests: dict[int, tuple[int, int, int, int]] = {}
        for job_id, tasks in active_by_job.items():
            resources = jobs[job_id].resources
            need = requests.get(id(resources))
            if need is None:
                need = requests[id(resources)] = request_tuple(resources)
            c, m, g, u = need
            if len(tasks) > 1 and tasks[0].worker == tasks[1].worker:
                # Jobs whose tasks were packed onto a worker list them in runs per worker (13
                # tasks a run on the squatters mix): each run is charged once, its count times
                # the request.
                for worker, k, idle in _runs_by_worker(tasks, running):
                    w = index.get(worker)
                    if w is not None:
                        cpu[w] -= c * k
                        mem[w] -= m * k
                        if g:
                            gpu[w] -= g * k
                        if u:
                            tpu[w] -= u * k
                        building[w] += idle
                continue
            for task in tasks:
                w = index.get(task.worker)
                if w is not None:
                    cpu[w] -= c
                    mem[w] -= m
                    # Most tasks ask for no GPU or no TPU: skipping a zero saves a sixth here.
                    if g:
                        gpu[w] -= g
                    if u:
                        tpu[w] -= u
                    if task.state is not running:
                        building[w] += 1
        # Priced from the same memo (a burst of ended tasks leaves ~16,000 unfinished attempts).
        for task in unfinished:
            w = index.get(task.unfinished_attempt_worker)
            if w is not None:
                resources = jobs[task.job_id].resources
                need = requests.get(id(resources))
                if need is None:
                    need = requests[id(resources)] = request_tuple(resources)
                c, m, g, u = need
                cpu[w] -= c
                mem[w] -= m
                if g:
                    gpu[w] -= g
                if u:
                    tpu[w] -= u

        self.start_cpu = list(self.cpu)
        self.start_mem = list(self.mem)
        self.start_gpu = list(self.gpu)
        self.start_tpu = list(self.tpu)
        self.start_building = list(self.building)

    def capacity_left(self) -> CapacityLeft:
        """The free capacity as it stands now (after the placements made so far)."""
        return CapacityLeft(
            tuple(self.ids), tuple(self.cpu), tuple(self.mem), tuple(self.gpu), tuple(self.tpu), tuple(self.building)
        )

    def has_build_slot(self, w: int) -> bool:
        """Fewer than ``max_building_tasks`` ASSIGNED or BUILDING tasks on ``w``."""
        return self.building[w] < self.max_building

    def has_room(self, w: int, shape: Shape) -> bool:
        """Enough free CPU, memory, GPUs and TPU chips on ``w`` for one task of ``shape`` (no caps)."""
        return (
            self.cpu[w] >= shape.cpu
            and self.mem[w] >= shape.mem
            and self.gpu[w] >= shape.gpu
            and self.tpu[w] >= shape.tpu
        )

    def fits(self, w: int, shape: Shape) -> bool:
        """Whether one more task of ``shape`` fits on worker ``w`` right now (caps included)."""
        return (
            self.assigned[w] < self.max_assign
            and self.building[w] < self.max_building
            and self.cpu[w] >= shape.cpu
            and self.mem[w] >= shape.mem
            and self.gpu[w] >= shape.gpu
            and self.tpu[w] >= shape.tpu
        )

    def take(self, w: int, shape: Shape) -> None:
        """Place one task of ``shape`` on ``w``: it holds the resources and a build slot."""
        self.cpu[w] -= shape.cpu
        self.mem[w] -= shape.mem
        self.gpu[w] -= shape.gpu
        self.tpu[w] -= shape.tpu
        self.assigned[w] += 1
        self.building[w] += 1

    def release(self, w: int, cpu: int, mem: int, gpu: int, tpu: int) -> None:
        """Give back a preempted RUNNING task's resources (it held no build slot)."""
        self.cpu[w] += cpu
        self.mem[w] += mem
        self.gpu[w] += gpu
        self.tpu[w] += tpu


def _runs_by_worker(tasks: Sequence[TaskSnapshot], running: TaskState) -> list[tuple[str | None, int, int]]:
    """(worker, how many tasks, how many of them not ``running``) per run of consecutive
    ``tasks`` on one worker, in order (a worker may come back in a later run)."""
    runs = []
    worker = tasks[0].worker
    k = idle = 0
    for task in tasks:
        if task.worker != worker:
            runs.append((worker, k, idle))
            worker = task.worker
            k = idle = 0
        k += 1
        if task.state is not running:
            idle += 1
    runs.append((worker, k, idle))
    return runs
