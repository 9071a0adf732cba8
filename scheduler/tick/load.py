"""The tick's load step: database rows -> the :class:`ClusterSnapshot` the core decides over.

``load_snapshot`` reads everything a tick decides over with a fixed number of queries, whatever
the size of the cluster, and returns it together with the id maps the shell needs to write the
decision back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


from scheduler.budgets.rules import effective_budgets
from scheduler.foundation.cluster_config import cluster_config, group_specs, scheduler_config
from scheduler.core.kueue import KueueInput
from scheduler.core.types import ClusterSnapshot, TaskSnapshot
from scheduler.store.cluster_rows import TaskRow, read_cluster
from scheduler.tick.kueue import split_kueue


# Whether the rows were read whole or only the changes since the previous read.
Refresh = Literal["all", "changes"]


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """What the tick decides over. ``snapshot`` is the core's part (tasks routed to Kubernetes
    left out, see :func:`split_kueue`); ``kueue`` the Kubernetes promotion drain's input;
    ``routes`` the jobs routed for the first time this tick (job pk -> backend), to stamp;
    ``refresh`` whether the rows were read whole (``all``) or as changes (``changes``);
    ``job_states`` how each job finished, as read, or "" while it is live (job name -> state
    value or ""; which of pending and running a live job is, the rows kept between ticks do not
    follow, see ``scheduler.store.cluster_rows``)."""

    snapshot: ClusterSnapshot
    tasks: dict[str, TaskRow]
    job_pks: dict[str, int]
    worker_pks: dict[str, int]
    job_states: dict[str, str] = field(default_factory=dict)
    kueue: KueueInput = field(default_factory=KueueInput)
    routes: dict[int, str] = field(default_factory=dict)
    refresh: Refresh = "all"
    # Task pk -> snapshot, and where the rows' change log stood (``store.cluster_rows.task_changes``):
    # the board updates its counts from the tasks that changed since its last tick.
    task_snapshots: dict[int, TaskSnapshot] = field(default_factory=dict)
    changes: tuple[int, int] = (0, 0)


def load_snapshot(now_ms: int) -> LoadedSnapshot:
    """The cluster at ``now_ms`` as the core sees it, with the keys to write the decision back.

    The rows come from :func:`scheduler.store.cluster_rows.read_cluster` (whole, or only what changed
    since this process's previous read, in a fixed number of queries either way); budgets and
    the Kubernetes split take a few small queries more; the TPU scale groups come from the
    cluster config.
    """
    view = read_cluster()
    snapshot = ClusterSnapshot(
        now_ms=now_ms,
        config=scheduler_config(),
        budgets=effective_budgets(now_ms),
        workers=view.workers,
        jobs=view.jobs,
        tasks=view.tasks,
        scale_groups=group_specs(cluster_config()),
    )
    snapshot, kueue, routes = split_kueue(snapshot)
    return LoadedSnapshot(
        snapshot=snapshot,
        tasks=view.task_rows,
        job_pks=view.job_pks,
        worker_pks=view.worker_pks,
        job_states=view.job_states,
        kueue=kueue,
        routes=routes,
        refresh=view.refresh,
        task_snapshots=view.task_snapshots,
        changes=view.changes,
    )
