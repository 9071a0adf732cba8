"""The project's Celery app with each task run's CPU recorded, for ``bench_api.py --task-cpu``.

``celery -A benchmarks.celery_task_cpu worker ...`` runs the same app (``iris_web.celery``) and
appends one line per task run to the file named by ``IRIS_BENCH_TASK_CPU_LOG``: the task's name,
when it started (``time.time()``), its wall seconds and the CPU seconds of the process that ran it
(``time.process_time()`` around the run, in the pool process). So the tick worker's share of a
benchmark window can be split by task: ticks, the dispatcher's drains, event moves, the rest.
"""

from __future__ import annotations

import os
import time

from celery.signals import task_postrun, task_prerun

from iris_web.celery import app  # noqa: F401 -- the app this module's name hands to ``celery -A``

_running: dict[str, tuple[float, float]] = {}


@task_prerun.connect
def _started(task_id=None, **_) -> None:
    _running[task_id] = (time.time(), time.process_time())


@task_postrun.connect
def _ended(task_id=None, task=None, **_) -> None:
    started = _running.pop(task_id, None)
    path = os.environ.get("IRIS_BENCH_TASK_CPU_LOG")
    if started is None or not path:
        return
    wall_start, cpu_start = started
    with open(path, "a") as out:
        out.write(
            f"{task.name}\t{wall_start:.3f}\t{time.time() - wall_start:.4f}\t{time.process_time() - cpu_start:.4f}\n"
        )


def summary(path: str, opened: float, closed: float) -> list[str]:
    """Per task name, the runs that started in ``[opened, closed)`` (``time.time()``): count,
    wall and CPU seconds, as printed lines, most CPU first."""
    totals: dict[str, list[float]] = {}
    try:
        with open(path) as lines:
            for line in lines:
                name, start, wall, cpu = line.rstrip("\n").split("\t")
                if opened <= float(start) < closed:
                    row = totals.setdefault(name, [0, 0.0, 0.0])
                    row[0] += 1
                    row[1] += float(wall)
                    row[2] += float(cpu)
    except FileNotFoundError:
        return ["Celery tasks: no record"]
    ordered = sorted(totals.items(), key=lambda item: -item[1][2])
    return ["Celery task runs started in the window (runs, wall s, CPU s of the pool process):"] + [
        f"  {name}: {int(n)} runs, wall {wall:.2f} s, CPU {cpu:.2f} s ({cpu / max(n, 1) * 1000:.0f} ms a run)"
        for name, (n, wall, cpu) in ordered
    ]
