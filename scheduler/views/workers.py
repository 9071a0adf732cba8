"""Workers: capacity and what is held on each, running tasks, health, and drain for operators;
above them each backend's health, last sync and errors, and the live TPU slices."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.foundation.errors import ServiceError
from scheduler.execution.queries import with_active_tasks, worker_tasks, worker_use, workers_by_name
from scheduler.execution.workers import drain_worker, undrain_worker
from scheduler.provisioning.health import backend_status
from scheduler.provisioning.tpu import tpu_slices
from scheduler.views.common import PAGE_SIZE, POLL_SECONDS, operator_required, page_or_fragment, window, require_POST

# Running tasks listed per worker; the rest are counted.
TASKS_SHOWN = 6
# Live TPU slices listed (newest first); a cluster rarely holds more, the rest are counted.
SLICES_SHOWN = 50


def share(used: int, total: int, ending: int = 0) -> dict:
    """A bar of ``used`` of ``total``: red over capacity, unless what is over is ``ending``
    (attempts ending, held until the worker confirms): amber then, as it frees by itself."""
    percent = 100.0 * used / total if total else (100.0 if used else 0.0)
    level = "amber" if percent >= 75 else "green"
    if percent > 100:
        level = "amber" if used - ending <= total else "red"
    return {"used": used, "total": total, "percent": percent, "width": min(100.0, round(percent, 1)), "level": level}


def health(worker, now) -> dict:
    """Healthy, draining, or silent for longer than the agents' grace period."""
    age = (now - worker.last_heartbeat).total_seconds() if worker.last_heartbeat else None
    if not worker.healthy:
        return {"label": "unhealthy", "level": "red", "title": "marked unhealthy: nothing new is placed here"}
    if worker.draining:
        return {
            "label": "draining",
            "level": "amber",
            "title": "draining: running work finishes, nothing new is placed",
        }
    if age is not None and age > settings.WORKER_GRACE_SECONDS:
        return {"label": "silent", "level": "amber", "title": f"no heartbeat for {age:,.0f} s"}
    return {"label": "healthy", "level": "green", "title": "healthy and accepting work"}


def backends_context() -> dict:
    """What the backends and slices panels show (``_parts.html#backends``, ``#slices``). Four queries."""
    slices = tpu_slices()
    return {
        "backends": backend_status(),
        "slices": list(slices[:SLICES_SHOWN]),
        "more_slices": max(0, slices.count() - SLICES_SHOWN),
    }


@login_required
def workers(request):
    qs = workers_by_name()
    win = window(request, qs.count(), PAGE_SIZE)
    page = with_active_tasks(list(qs[win.offset : win.offset + win.size]))
    pks = [w.pk for w in page]
    use = worker_use(pks)
    tasks = worker_tasks(pks)
    now = timezone.now()
    for w in page:
        u = use[w.pk]
        w.cpu_use = share(u.cpu_millicores, w.cpu_millicores, u.ending_cpu_millicores)
        w.ending_cpu = u.ending_cpu_millicores
        w.mem_use = share(u.memory_bytes, w.memory_bytes)
        w.chip_use = share(u.chips, w.device_count) if w.device_type != "cpu" else None
        w.held_attempts = u.attempts
        w.running = tasks[w.pk][:TASKS_SHOWN]
        w.more = max(0, len(tasks[w.pk]) - TASKS_SHOWN)
        w.health = health(w, now)
    context = {
        "workers": page,
        "window": win,
        "operator": roles.is_operator(request.user),
        "poll": POLL_SECONDS * 2,
        **backends_context(),
    }
    return page_or_fragment(request, "scheduler/workers.html", "workers", context)


@operator_required("Draining a worker")
@require_POST
def drain(request, name: str):
    try:
        worker = drain_worker(request.user, name)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{worker.name} is draining: what runs there finishes, nothing new is placed.")
    return redirect("console:workers")


@operator_required("Undraining a worker")
@require_POST
def undrain(request, name: str):
    try:
        worker = undrain_worker(request.user, name)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{worker.name} takes new work again.")
    return redirect("console:workers")
