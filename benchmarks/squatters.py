"""A second synthetic cluster, built independently of ``benchmarks/synthetic.py``, so a speed
target cannot be met by tuning to one generator: an accelerator-heavy cluster where CPU work
squats on GPU and TPU hosts and the pending work has to preempt it.

``generate(pending=..., workers=..., seed=..., squat_share=..., gang_share=...,
constraint_share=..., tight_budget_share=...)`` returns a snapshot document (see
``scheduler.core.wire``) with:

- workers: a fifth CPU hosts, half 8-GPU hosts of three variants, the rest TPU hosts in slices
  of 4 (``tpu-name``, ``tpu-worker-id``); three regions of two zones, a ``pool`` (reserved or
  spot) on every host; 2% unhealthy;
- running load: CPU hosts about 80% full of CPU tasks; on a ``squat_share`` of the GPU and TPU
  hosts CPU-only tasks (mostly BATCH and INTERACTIVE) hold most of the cores, so accelerator
  work fits only by evicting them; the other accelerator hosts run GPU tasks or whole TPU gangs
  of every band;
- pending work, exactly ``pending`` tasks: GPU jobs of every variant (some ``auto``), TPU gangs
  (``gang_share`` of the accelerator jobs), CPU arrays; a ``constraint_share`` of jobs with hard
  zone or region constraints, soft pool preferences, ``ne`` and ``in`` constraints; a few past
  their scheduling deadline;
- users: a ``tight_budget_share`` with budgets they already exceed (their INTERACTIVE work
  runs as BATCH and cannot preempt), the others generous or unlimited.

The same arguments always give the same document.
"""

from __future__ import annotations

import random

GIB = 1 << 30
NOW_MS = 1_800_000_000_000
TPU_HOSTS_PER_SLICE = 4
# Host sizes (millicores, bytes).
CPU_HOST = (32_000, 128 * GIB)
GPU_HOST = (96_000, 1024 * GIB)
TPU_HOST = (208_000, 448 * GIB)
GPUS_PER_HOST = 8
TPU_CHIPS_PER_HOST = 4
GPU_VARIANTS = ("h100", "a100", "l4")
TPU_VARIANTS = ("v5p", "v6e")
ZONES = {
    "us-east5": ("us-east5-a", "us-east5-b"),
    "us-west4": ("us-west4-a", "us-west4-b"),
    "asia-ne1": ("asia-ne1-a", "asia-ne1-b"),
}
# Per-task (millicores, bytes) of CPU work; squatters are the larger ones.
CPU_SHAPES = ((500, 1 * GIB), (1_000, 4 * GIB), (4_000, 8 * GIB), (8_000, 32 * GIB), (24_000, 96 * GIB))
# Each GPU of a GPU task comes with this much CPU and memory.
PER_GPU = (10_000, 100 * GIB)
USERS = 400


def generate(
    pending: int,
    workers: int,
    seed: int = 0,
    squat_share: float = 0.5,
    gang_share: float = 0.3,
    constraint_share: float = 0.3,
    tight_budget_share: float = 0.25,
) -> dict:
    rng = random.Random(
        f"squatters-{seed}-{pending}-{workers}-{squat_share}-{gang_share}-{constraint_share}-{tight_budget_share}"
    )
    zones = [(region, zone) for region, pair in ZONES.items() for zone in pair]
    hosts: list[dict] = []
    n_cpu, n_gpu = workers // 5, workers // 2
    n_tpu = max(workers - n_cpu - n_gpu, 0) // TPU_HOSTS_PER_SLICE * TPU_HOSTS_PER_SLICE

    def host(name: str, size: tuple[int, int], device: dict, extra: dict | None = None) -> dict:
        region, zone = rng.choice(zones)
        attributes = {
            "region": region,
            "zone": zone,
            "pool": "spot" if rng.random() < 0.3 else "reserved",
            **(extra or {}),
        }
        return {
            "id": name,
            "healthy": rng.random() >= 0.02,
            "cpu_millicores": size[0],
            "memory_bytes": size[1],
            "device": device,
            "attributes": attributes,
        }

    for i in range(n_cpu):
        hosts.append(host(f"c{i:05d}", CPU_HOST, {"type": "cpu"}))
    for i in range(n_gpu):
        variant = GPU_VARIANTS[i % len(GPU_VARIANTS)]
        hosts.append(host(f"g{i:05d}", GPU_HOST, {"type": "gpu", "variant": variant, "count": GPUS_PER_HOST}))
    for s in range(n_tpu // TPU_HOSTS_PER_SLICE):
        variant = TPU_VARIANTS[s % len(TPU_VARIANTS)]
        for k in range(TPU_HOSTS_PER_SLICE):
            hosts.append(
                host(
                    f"t{s:04d}-{k}",
                    TPU_HOST,
                    {"type": "tpu", "variant": variant, "count": TPU_CHIPS_PER_HOST},
                    {"tpu-name": f"slice-{s:04d}", "tpu-worker-id": str(k)},
                )
            )

    users = [f"u{i:03d}" for i in range(USERS)]
    budgets = []
    for user in users:
        roll = rng.random()
        if roll < tight_budget_share:
            budgets.append({"user": user, "budget_limit": rng.choice((50, 200, 1_000)), "max_band": "interactive"})
        elif roll < tight_budget_share + 0.35:
            budgets.append({"user": user, "budget_limit": 0, "max_band": rng.choice(("interactive", "production"))})
        elif roll < tight_budget_share + 0.6:
            budgets.append({"user": user, "budget_limit": 5_000_000, "max_band": "interactive"})

    jobs: list[dict] = []
    tasks: list[dict] = []
    clock = [NOW_MS - 7 * 24 * 3600 * 1000]

    def job(band: str, replicas: int, resources: dict, **extra) -> dict:
        clock[0] += rng.randint(1, 2_000)
        user = rng.choice(users)
        spec = {
            "id": f"/{user}/j{len(jobs):06d}",
            "band": band,
            "submitted_at_ms": clock[0],
            "replicas": replicas,
            "resources": resources,
            **extra,
        }
        jobs.append(spec)
        return spec

    def cpu_resources(shape: tuple[int, int]) -> dict:
        return {"cpu_millicores": shape[0], "memory_bytes": shape[1], "device": {"type": "cpu"}}

    def run_on(spec: dict, index: int, worker: str, band: str | None = None) -> None:
        tasks.append(
            {"id": f"{spec['id']}/{index}", "state": "running", "worker": worker, "band": band or spec["band"]}
        )

    # -- running load -----------------------------------------------------------------------
    low_bands = (("batch", 60), ("interactive", 35), ("production", 5))
    for h in hosts:
        if not h["healthy"]:
            continue
        kind = h["device"]["type"]
        cpu, mem = h["cpu_millicores"], h["memory_bytes"]
        if kind == "cpu" or rng.random() < squat_share:
            # CPU work: on a CPU host to about 80%; on an accelerator host, squatting most cores.
            fill = 0.8 if kind == "cpu" else rng.uniform(0.75, 0.95)
            shape = rng.choice(CPU_SHAPES if kind == "cpu" else CPU_SHAPES[2:])
            count = int(min(cpu * fill // shape[0], mem * fill // shape[1]))
            if count:
                spec = job(_pick(rng, low_bands), count, cpu_resources(shape))
                for index in range(count):
                    run_on(spec, index, h["id"])
        elif kind == "gpu":
            used = rng.randint(2, GPUS_PER_HOST)
            per_task = rng.choice([c for c in (1, 2, 4, 8) if c <= used])
            count = used // per_task
            spec = job(
                _pick(rng, (("batch", 40), ("interactive", 40), ("production", 20))),
                count,
                {
                    "cpu_millicores": PER_GPU[0] * per_task,
                    "memory_bytes": PER_GPU[1] * per_task,
                    "device": {"type": "gpu", "variant": h["device"]["variant"], "count": per_task},
                },
            )
            for index in range(count):
                run_on(spec, index, h["id"])
    # Whole TPU gangs on the slices whose hosts are all free of squatters and healthy.
    by_slice: dict[str, list[dict]] = {}
    busy = {t["worker"] for t in tasks}
    for h in hosts:
        if h["device"]["type"] == "tpu":
            by_slice.setdefault(h["attributes"]["tpu-name"], []).append(h)
    for members in by_slice.values():
        if all(m["healthy"] and m["id"] not in busy for m in members) and rng.random() < 0.8:
            spec = job(
                _pick(rng, (("batch", 40), ("interactive", 40), ("production", 20))),
                TPU_HOSTS_PER_SLICE,
                {
                    "cpu_millicores": 100_000,
                    "memory_bytes": 200 * GIB,
                    "device": {"type": "tpu", "variant": members[0]["device"]["variant"], "count": TPU_CHIPS_PER_HOST},
                },
                coscheduling={"group_by": "tpu-name"},
            )
            for index, m in enumerate(members):
                run_on(spec, index, m["id"])

    # -- pending work -----------------------------------------------------------------------
    pending_bands = (("system", 2), ("production", 20), ("interactive", 58), ("batch", 20))
    left = pending
    while left > 0:
        roll = rng.random()
        band = _pick(rng, pending_bands)
        extra: dict = {}
        if rng.random() < constraint_share:
            extra["constraints"] = _constraints(rng, zones)
        if rng.random() < 0.01:
            extra["scheduling_deadline_ms"] = NOW_MS - rng.randint(1, 3_600_000)
        if roll < 0.45:
            # Accelerator work: TPU gangs or GPU jobs.
            if rng.random() < gang_share and n_tpu:
                replicas = TPU_HOSTS_PER_SLICE
                resources = {
                    "cpu_millicores": 100_000,
                    "memory_bytes": 200 * GIB,
                    "device": {"type": "tpu", "variant": rng.choice(TPU_VARIANTS), "count": TPU_CHIPS_PER_HOST},
                }
                extra["coscheduling"] = {"group_by": "tpu-name"}
            else:
                gpus = rng.choice((1, 1, 2, 4, 8))
                replicas = min(rng.choice((1, 1, 2, 4, 16)), left)
                resources = {
                    "cpu_millicores": PER_GPU[0] * gpus,
                    "memory_bytes": PER_GPU[1] * gpus,
                    "device": {"type": "gpu", "variant": rng.choice(GPU_VARIANTS + ("auto",)), "count": gpus},
                }
            if replicas > left:
                continue
        else:
            replicas = min(rng.choice((1, 4, 10, 50, 200)), left)
            resources = cpu_resources(rng.choice(CPU_SHAPES))
        job(band, replicas, resources, **extra)
        left -= replicas

    return {
        "description": f"squatters: {workers} workers, {pending} pending, squat share {squat_share}",
        "now_ms": NOW_MS,
        "config": {"max_tasks_per_job_per_cycle": 64, "max_assignments_per_worker": 4, "max_building_tasks": 8},
        "budgets": budgets,
        "workers": hosts,
        "jobs": jobs,
        "tasks": tasks,
    }


def _constraints(rng: random.Random, zones: list[tuple[str, str]]) -> list[dict]:
    region, zone = rng.choice(zones)
    roll = rng.random()
    if roll < 0.3:
        return [{"key": "zone", "op": "eq", "value": zone}]
    if roll < 0.5:
        return [
            {"key": "region", "op": "eq", "value": region},
            {"key": "pool", "op": "eq", "value": "reserved", "soft": True},
        ]
    if roll < 0.7:
        return [{"key": "pool", "op": "ne", "value": "spot"}]
    if roll < 0.85:
        return [{"key": "zone", "op": "in", "value": [z for _, z in rng.sample(zones, 3)]}]
    return [{"key": "pool", "op": "eq", "value": "spot", "soft": True}]


def _pick(rng: random.Random, weighted) -> str:
    return rng.choices([name for name, _ in weighted], [weight for _, weight in weighted])[0]
