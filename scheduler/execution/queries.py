"""Read side of workers: the worker list with its load, for the API and the console."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from scheduler.core.types import DeviceType
from scheduler.models import Attempt, Task, Worker
from scheduler.store.states import ACTIVE_VALUES


def workers_with_load() -> QuerySet[Worker]:
    """Workers by name, with how many tasks are active on each (one query).

    A count per worker in a subquery, which only active tasks answer (the partial index
    ``task_active_by_worker``): a join of all the workers' tasks would read their finished
    ones too, which no index by worker holds."""
    active = (
        Task.objects.filter(worker=OuterRef("pk"), state__in=ACTIVE_VALUES)
        .order_by()
        .values("worker")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Worker.objects.annotate(active_tasks=Coalesce(Subquery(active), 0)).order_by("name")


def workers_by_name() -> QuerySet[Worker]:
    """Every worker by name, without its load: the list to cut a page from."""
    return Worker.objects.order_by("name")


def with_active_tasks(workers: list[Worker]) -> list[Worker]:
    """The given workers with ``active_tasks`` set (as :func:`workers_with_load` annotates it).

    One grouped query over the tasks of these workers only, so a page of a large cluster costs
    what the page holds, not what the cluster does.
    """
    counts = (
        dict(
            Task.objects.filter(worker_id__in=[w.pk for w in workers], state__in=ACTIVE_VALUES)
            .order_by()
            .values_list("worker_id")
            .annotate(n=Count("id"))
        )
        if workers
        else {}
    )
    for worker in workers:
        worker.active_tasks = counts.get(worker.pk, 0)
    return workers


@dataclass
class WorkerUse:
    """What a worker's unfinished attempts hold (the scheduler counts the same)."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    chips: int = 0
    attempts: int = 0
    # Of the CPU, what attempts that ended (preempted, cancelled, lost, finished) hold until the
    # worker confirms their process is gone: a preemptor placed in the same tick is counted
    # beside its victims until then.
    ending_cpu_millicores: int = 0


def worker_use(worker_pks: list[int]) -> dict[int, WorkerUse]:
    """Capacity held on each worker by attempts not yet finished there. One grouped query.

    An attempt holds its task's request from assignment until the worker confirms its process
    ended, including a preempted or cancelled attempt still shutting down.
    """
    use = {pk: WorkerUse() for pk in worker_pks}
    rows = (
        Attempt.objects.filter(worker_id__in=worker_pks, finished_at__isnull=True)
        .order_by()
        .values_list("worker_id")
        .annotate(
            cpu=Sum("task__job__cpu_millicores"),
            mem=Sum("task__job__memory_bytes"),
            chips=Sum("task__job__device_count", filter=~Q(task__job__device_type=DeviceType.CPU.value)),
            n=Count("id"),
            ending_cpu=Sum("task__job__cpu_millicores", filter=~Q(state__in=ACTIVE_VALUES)),
        )
    )
    for worker_pk, cpu, mem, chips, n, ending_cpu in rows:
        use[worker_pk] = WorkerUse(cpu or 0, mem or 0, chips or 0, n, ending_cpu or 0)
    return use


def worker_tasks(worker_pks: list[int]) -> dict[int, list[Task]]:
    """Active tasks on each of the given workers, by job and index. One query."""
    result: dict[int, list[Task]] = {pk: [] for pk in worker_pks}
    for task in (
        Task.objects.filter(worker_id__in=worker_pks, state__in=ACTIVE_VALUES)
        .select_related("job")
        .only("index", "state", "band", "worker_id", "job__name", "job__user")
        .order_by("job__name", "index")
    ):
        result[task.worker_id].append(task)
    return result
