"""A synthetic cluster in the snapshot JSON format, for benchmarks and load tests.

``generate(pending=..., workers=..., seed=...)`` returns a snapshot document (see
``scheduler.core.wire``) with:

- workers: CPU hosts, 8-GPU hosts of two variants, and TPU hosts in slices of 4 (``tpu-name``,
  ``tpu-worker-id``) of two variants, spread over two regions and four zones; 1% unhealthy;
- users with budget rows (some tight, some generous, some unlimited) and users on the defaults;
- running load filling about 70% of capacity in all four bands, stamped bands included, so the
  preemption pass has real work: BATCH and INTERACTIVE squatters, GPU tasks, whole TPU slices;
- exactly ``pending`` pending tasks over jobs of every band and kind (CPU arrays, GPU jobs with
  a fixed or ``auto`` variant, TPU gangs of 4, child jobs, hard and soft constraints, a few
  already past their scheduling deadline).

The same arguments always give the same document.
"""

from __future__ import annotations

import random

GIB = 1 << 30
# The snapshot's fixed "now" (ms since the epoch), so runs are reproducible.
NOW_MS = 1_800_000_000_000
# Default share of each host's capacity the running load fills: enough that placement runs out
# of room and the preemption pass has work, as in a busy cluster.
TARGET_LOAD = 0.7
# Hosts per TPU slice, and so tasks per TPU gang (as on a v5p-32: 4 hosts of 4 chips).
TPU_HOSTS_PER_SLICE = 4

# Host sizes (millicores, bytes): a mid-size CPU VM, an 8-GPU node, a v5p TPU host.
CPU_HOST = {"cpu_millicores": 32_000, "memory_bytes": 128 * GIB}
GPU_HOST = {"cpu_millicores": 96_000, "memory_bytes": 1024 * GIB}
TPU_HOST = {"cpu_millicores": 208_000, "memory_bytes": 448 * GIB}
GPU_VARIANTS = ("h100", "a100")
TPU_VARIANTS = ("v5p", "v6e")
REGIONS = {"us-central1": ("us-central1-a", "us-central1-b"), "europe-west4": ("europe-west4-a", "europe-west4-b")}

# Per-task (millicores, bytes) requests of CPU jobs.
CPU_SHAPES = (
    (1_000, 2 * GIB),
    (2_000, 4 * GIB),
    (4_000, 16 * GIB),
    (8_000, 32 * GIB),
    (16_000, 64 * GIB),
)
# GPUs per task of GPU jobs (each GPU comes with 8 cores and 96 GiB).
GPU_COUNTS = (1, 2, 4, 8)
# Relative frequency of each requested band among pending jobs and among running work.
BAND_WEIGHTS = (("system", 2), ("production", 10), ("interactive", 58), ("batch", 30))
RUNNING_BAND_WEIGHTS = (("production", 15), ("interactive", 45), ("batch", 40))


def _pick(rng: random.Random, weighted) -> str:
    names = [name for name, _ in weighted]
    weights = [weight for _, weight in weighted]
    return rng.choices(names, weights)[0]


def _replicas(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.70:
        return rng.randint(1, 4)
    if roll < 0.95:
        return rng.randint(5, 32)
    return rng.randint(33, 128)


def _workers(rng: random.Random, count: int) -> tuple[list[dict], list[list[dict]]]:
    """Workers, and the TPU hosts grouped per slice."""
    workers = []
    slices: list[list[dict]] = []
    n_tpu = (int(count * 0.3) // TPU_HOSTS_PER_SLICE) * TPU_HOSTS_PER_SLICE
    n_gpu = int(count * 0.3)
    n_cpu = count - n_tpu - n_gpu
    regions = list(REGIONS)

    def place_attrs(i: int) -> dict:
        region = regions[i % len(regions)]
        return {
            "region": region,
            "zone": REGIONS[region][(i // 2) % 2],
            "preemptible": "true" if i % 5 == 0 else "false",
        }

    for i in range(n_cpu):
        workers.append({"id": f"cpu-{i:05d}", **CPU_HOST, "device": {"type": "cpu"}, "attributes": place_attrs(i)})
    for i in range(n_gpu):
        variant = GPU_VARIANTS[i % len(GPU_VARIANTS)]
        workers.append(
            {
                "id": f"gpu-{i:05d}",
                **GPU_HOST,
                "device": {"type": "gpu", "variant": variant, "count": 8},
                "attributes": place_attrs(i),
            }
        )
    for s in range(n_tpu // TPU_HOSTS_PER_SLICE):
        variant = TPU_VARIANTS[s % len(TPU_VARIANTS)]
        attrs = place_attrs(s)
        hosts = []
        for h in range(TPU_HOSTS_PER_SLICE):
            host = {
                "id": f"tpu-{s:04d}-{h}",
                **TPU_HOST,
                "device": {"type": "tpu", "variant": variant, "count": 4},
                "attributes": {**attrs, "tpu-name": f"slice-{s:04d}", "tpu-worker-id": str(h)},
            }
            hosts.append(host)
            workers.append(host)
        slices.append(hosts)
    for worker in workers:
        if rng.random() < 0.01:
            worker["healthy"] = False
    return workers, slices


class _Ids:
    """Job ids and strictly increasing submission times."""

    def __init__(self) -> None:
        self.n = 0
        self.t = NOW_MS - 86_400_000

    def next(self, user: str) -> tuple[str, int]:
        self.n += 1
        self.t += 997
        return f"/{user}/job-{self.n:06d}", self.t


def _resources(cpu: int, mem: int, device: dict | None = None) -> dict:
    return {"cpu_millicores": cpu, "memory_bytes": mem, "device": device or {"type": "cpu"}}


def _running_load(
    rng: random.Random, workers: list[dict], slices: list[list[dict]], users: list[str], ids: _Ids, load: float
):
    jobs: list[dict] = []
    tasks: list[dict] = []

    def job(user: str, band: str, resources: dict, replicas: int, **extra) -> dict:
        job_id, submitted = ids.next(user)
        spec = {
            "id": job_id,
            "band": band,
            "submitted_at_ms": submitted,
            "replicas": replicas,
            "resources": resources,
            **extra,
        }
        jobs.append(spec)
        return spec

    def run(spec: dict, index: int, worker: dict, stamped: str) -> None:
        tasks.append({"id": f"{spec['id']}/{index}", "state": "running", "worker": worker["id"], "band": stamped})

    for worker in workers:
        if worker.get("healthy") is False or worker["device"]["type"] == "tpu":
            continue
        user = rng.choice(users)
        band = _pick(rng, RUNNING_BAND_WEIGHTS)
        # A demoted user's INTERACTIVE work may have been stamped BATCH at assignment.
        stamped = "batch" if band == "interactive" and rng.random() < 0.2 else band
        if worker["device"]["type"] == "gpu":
            per_task = rng.choice(GPU_COUNTS)
            count = max(1, round(8 * load / per_task))
            resources = _resources(
                8_000 * per_task,
                96 * GIB * per_task,
                {"type": "gpu", "variant": worker["device"]["variant"], "count": per_task},
            )
        else:
            cpu, mem = rng.choice(CPU_SHAPES)
            count = max(1, int(CPU_HOST["cpu_millicores"] * load // cpu))
            resources = _resources(cpu, mem)
        spec = job(user, band, resources, count)
        for index in range(count):
            run(spec, index, worker, stamped)
    for hosts in slices:
        if rng.random() >= load or any(h.get("healthy") is False for h in hosts):
            continue
        band = _pick(rng, RUNNING_BAND_WEIGHTS)
        device = hosts[0]["device"]
        spec = job(
            rng.choice(users),
            band,
            _resources(96_000, 200 * GIB, dict(device)),
            len(hosts),
            coscheduling={"group_by": "tpu-name"},
        )
        for index, host in enumerate(hosts):
            run(spec, index, host, band)
    return jobs, tasks


def _pending_jobs(
    rng: random.Random, pending: int, users: list[str], ids: _Ids, running_jobs: list[dict]
) -> list[dict]:
    jobs: list[dict] = []
    left = pending
    while left > 0:
        user = rng.choice(users)
        band = _pick(rng, BAND_WEIGHTS)
        kind = rng.random()
        extra: dict = {}
        if kind < 0.08 and left >= TPU_HOSTS_PER_SLICE:
            replicas = TPU_HOSTS_PER_SLICE
            device = {"type": "tpu", "variant": rng.choice(TPU_VARIANTS), "count": 4}
            resources = _resources(96_000, 200 * GIB, device)
            extra["coscheduling"] = {"group_by": "tpu-name"}
        elif kind < 0.30:
            replicas = min(left, rng.randint(1, 8))
            per_task = rng.choice(GPU_COUNTS)
            variant = rng.choice(GPU_VARIANTS + ("auto",))
            resources = _resources(
                8_000 * per_task, 96 * GIB * per_task, {"type": "gpu", "variant": variant, "count": per_task}
            )
        else:
            replicas = min(left, _replicas(rng))
            cpu, mem = rng.choice(CPU_SHAPES)
            resources = _resources(cpu, mem)
        roll = rng.random()
        if roll < 0.10:
            extra["constraints"] = [{"key": "region", "op": "eq", "value": rng.choice(list(REGIONS))}]
        elif roll < 0.15:
            extra["constraints"] = [{"key": "zone", "op": "in", "value": list(REGIONS["us-central1"])}]
        elif roll < 0.25:
            extra["constraints"] = [{"key": "preemptible", "op": "eq", "value": "false", "soft": True}]
        if rng.random() < 0.01:
            extra["scheduling_deadline_ms"] = NOW_MS - rng.randint(1, 3_600_000)
        job_id, submitted = ids.next(user)
        if running_jobs and rng.random() < 0.05:
            # A child of a running job: same user and tree, deeper, so it sorts first in its band.
            parent = rng.choice(running_jobs)
            job_id = f"{parent['id']}/child-{ids.n:06d}"
            extra.pop("band", None)
            band = parent["band"]
        jobs.append(
            {
                "id": job_id,
                "band": band,
                "submitted_at_ms": submitted,
                "replicas": replicas,
                "resources": resources,
                **extra,
            }
        )
        left -= replicas
    return jobs


def generate(pending: int = 10_000, workers: int = 1_000, seed: int = 0, load: float = TARGET_LOAD) -> dict:
    """A snapshot document with exactly ``pending`` pending tasks on ``workers`` workers, whose
    running work fills about ``load`` of each host's capacity (1.0: a full cluster, where
    every pending task that is to run must preempt)."""
    rng = random.Random(seed)
    worker_list, slices = _workers(rng, workers)
    n_users = max(8, workers // 25)
    users = [f"user{i:04d}" for i in range(n_users)]
    budgets = []
    for i, user in enumerate(users):
        kind = i % 4
        if kind == 0:
            budgets.append({"user": user, "budget_limit": 0, "max_band": "production"})
        elif kind == 1:
            budgets.append({"user": user, "budget_limit": 400_000, "max_band": "interactive"})
        elif kind == 2:
            budgets.append({"user": user, "budget_limit": 20_000, "max_band": "interactive"})
    ids = _Ids()
    running_jobs, running_tasks = _running_load(rng, worker_list, slices, users, ids, load)
    pending_jobs = _pending_jobs(rng, pending, users, ids, running_jobs)
    return {
        "description": f"synthetic cluster: {pending} pending tasks, {workers} workers, seed {seed}",
        "now_ms": NOW_MS,
        "config": {
            "max_tasks_per_job_per_cycle": 4,
            "max_assignments_per_worker": 4,
            "max_building_tasks": 8,
            "budget_defaults": {"budget_limit": 1000, "max_band": "interactive"},
        },
        "budgets": budgets,
        "workers": worker_list,
        "jobs": running_jobs + pending_jobs,
        "tasks": running_tasks,
    }
