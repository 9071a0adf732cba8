"""The tick process's cached rows (``scheduler.store.cluster_rows``) always equal a whole read.

On PostgreSQL a tick reads only the rows changed since the previous tick. These tests commit
real transactions (submissions, ticks, worker reports, cancellations, lost workers, confirmed
stops, deletions) in random orders and check after each that the rows read as changes are
exactly the rows a fresh process would read whole. One test holds a write open across a read,
the case a timestamp watermark gets wrong.
"""

from __future__ import annotations

import random
import re
import threading
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus
from scheduler.core.bands import Band
from scheduler.core.types import ACTIVE_STATES
from scheduler.execution.attempts import apply_report
from scheduler.execution.workers import declare_worker_lost, heartbeat
from scheduler.jobs.cancel import cancel_job
from scheduler.models import Attempt, Job, Task, Worker
from scheduler.store import cluster_rows
from scheduler.store.cluster_rows import ClusterRows, ClusterView, read_cluster
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ACTIVE = [s.value for s in ACTIVE_STATES]
NOW = datetime.fromtimestamp(NOW_MS / 1000, tz=UTC)


def read_whole() -> ClusterView:
    rows = ClusterRows()
    rows.refresh()
    assert rows.last_refresh_kind == "all"
    return rows.view()


def assert_same(cached: ClusterView, whole: ClusterView) -> None:
    assert cached.workers == whole.workers
    assert cached.worker_pks == whole.worker_pks
    assert cached.jobs == whole.jobs
    assert cached.job_pks == whole.job_pks
    assert cached.job_states == whole.job_states
    assert {t.id: t for t in cached.tasks} == {t.id: t for t in whole.tasks}
    assert len(cached.tasks) == len(whole.tasks)
    assert cached.task_rows == whole.task_rows


def cluster(workers: int = 6) -> None:
    for i in range(workers):
        make_worker(f"w{i}", cpu=4, memory_gib=16, rack=f"r{i % 2}")


class Operations:
    """Writes of every kind the cluster sees, each committed on its own."""

    def __init__(self) -> None:
        self.admin = User.objects.create_superuser("root", password="x")
        self.jobs = 0

    def submit(self, n: int) -> None:
        self.jobs += 1
        gang = n % 4 == 0
        make_job(
            f"/u{n % 3}/job{self.jobs}",
            replicas=2 if gang else 1 + n % 3,
            band=[Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH][n % 3],
            cpu=1 + n % 3,
            group_by="rack" if gang else None,
        )

    def tick(self, n: int) -> None:
        run_tick(NOW_MS + n)

    def report(self, n: int) -> None:
        attempts = list(Attempt.objects.filter(finished_at__isnull=True, state__in=ACTIVE).order_by("pk"))
        if attempts:
            attempt = attempts[n % len(attempts)]
            status = list(AttemptStatus)[n % len(AttemptStatus)]
            apply_report(AttemptReport(AttemptRef(attempt.task_id, attempt.number), status, exit_code=n % 2), NOW)

    def confirm_stopped(self, n: int) -> None:
        held = list(Attempt.objects.filter(finished_at__isnull=True).exclude(state__in=ACTIVE).order_by("pk"))
        if held:
            Attempt.objects.filter(pk=held[n % len(held)].pk).update(finished_at=NOW)

    def cancel(self, n: int) -> None:
        live = list(Job.objects.filter(state__in=["pending", "running"], parent=None).order_by("pk"))
        if live:
            cancel_job(self.admin, live[n % len(live)].name)

    def lose_worker(self, n: int) -> None:
        workers = list(Worker.objects.filter(healthy=True).order_by("pk"))
        if workers:
            declare_worker_lost(workers[n % len(workers)].pk, NOW, "lost in a test")

    def heal_workers(self, n: int) -> None:
        Worker.objects.filter(healthy=False).update(healthy=True)

    def heartbeat(self, n: int) -> None:
        workers = list(Worker.objects.order_by("pk").values_list("name", "healthy"))
        if workers:
            name, healthy = workers[n % len(workers)]
            heartbeat(name, healthy=healthy if n % 3 else not healthy, now=NOW)

    def drain(self, n: int) -> None:
        workers = list(Worker.objects.order_by("pk"))
        if workers:
            worker = workers[n % len(workers)]
            Worker.objects.filter(pk=worker.pk).update(draining=not worker.draining)

    def resize_worker(self, n: int) -> None:
        workers = list(Worker.objects.order_by("pk"))
        if workers:
            worker = workers[n % len(workers)]
            Worker.objects.filter(pk=worker.pk).update(
                cpu_millicores=1000 * (1 + n % 8), attributes={"rack": f"r{n % 3}"}
            )

    def add_worker(self, n: int) -> None:
        # Names that sort before, between and after the others: the order is the database's.
        make_worker(f"{'a' if n % 2 else 'w'}{n}-{Worker.objects.count()}", cpu=2, memory_gib=8, rack=f"r{n % 2}")

    def delete_job(self, n: int) -> None:
        ended = list(Job.objects.exclude(state__in=["pending", "running"]).order_by("pk"))
        if ended:
            ended[n % len(ended)].delete()


OPERATIONS = [name for name in vars(Operations) if not name.startswith("_")]


def test_a_long_run_of_writes_is_read_as_changes_exactly_as_a_whole_read_would():
    cluster()
    ops = Operations()
    read_cluster()
    plan = random.Random(7)
    weights = {
        "submit": 4,
        "tick": 4,
        "report": 3,
        "confirm_stopped": 1,
        "cancel": 1,
        "lose_worker": 1,
        "heal_workers": 1,
        "heartbeat": 2,
        "drain": 1,
        "resize_worker": 1,
        "add_worker": 1,
        "delete_job": 1,
    }
    kinds = []
    held_seen = False
    for n in range(120):
        name = plan.choices(list(weights), weights=list(weights.values()))[0]
        getattr(ops, name)(plan.randrange(50))
        cached = read_cluster()
        kinds.append(cached.refresh)
        held_seen |= any(t.unfinished_attempt_worker for t in cached.tasks)
        assert_same(cached, read_whole())
    # The run went through the interesting cases, on the incremental path.
    assert kinds.count("changes") > 80
    assert held_seen
    assert Attempt.objects.filter(state="succeeded").exists()
    assert Attempt.objects.filter(state="preempted").exists()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(st.sampled_from(OPERATIONS), st.integers(0, 50)), min_size=1, max_size=12))
def test_any_order_of_writes_is_read_as_changes_exactly_as_a_whole_read_would(steps):
    Job.objects.all().delete()
    Worker.objects.all().delete()
    User.objects.all().delete()
    cluster(4)
    ops = Operations()
    read_cluster()
    for name, n in steps:
        getattr(ops, name)(n)
        cached = read_cluster()
        assert_same(cached, read_whole())


def test_a_write_committed_after_a_read_that_began_before_it_is_not_missed():
    cluster(2)
    job = make_job("/alice/train", replicas=2)
    read_cluster()
    started = threading.Event()
    release = threading.Event()

    def slow_writer():
        try:
            with transaction.atomic():
                Task.objects.filter(job=job, index=0).update(state="killed")
                started.set()
                release.wait(10)
        finally:
            connection.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert started.wait(10)
    # The write is uncommitted: this read cannot see it, and must not skip it later.
    make_job("/bob/eval")
    during = read_cluster()
    assert during.refresh == "changes"
    assert {t.id for t in during.tasks} >= {"/alice/train/0", "/bob/eval/0"}
    release.set()
    writer.join()
    after = read_cluster()
    assert after.refresh == "changes"
    assert "/alice/train/0" not in {t.id for t in after.tasks}
    assert_same(after, read_whole())


def test_a_deletion_makes_the_next_read_whole():
    cluster(1)
    job = make_job("/alice/train")
    assert read_cluster().refresh == "all"
    assert read_cluster().refresh == "changes"
    job.delete()
    view = read_cluster()
    assert view.refresh == "all"
    assert "/alice/train" not in view.jobs


def test_a_read_inside_a_transaction_that_rolls_back_leaves_nothing_behind():
    cluster(1)
    make_job("/alice/train")
    assert read_cluster().refresh == "all"

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        make_job("/bob/ghost")
        inside = read_cluster()
        assert "/bob/ghost" in inside.jobs  # the caller sees its own writes...
        raise Rollback
    after = read_cluster()
    assert after.refresh == "changes"  # ...and the kept rows never did
    assert "/bob/ghost" not in after.jobs
    assert_same(after, read_whole())


def _read_columns(select: str, alias: str) -> list[str]:
    """The columns of ``alias`` a ``cluster_rows`` SELECT reads (``p.name`` is the parent's)."""
    columns = re.findall(rf"\b{alias}\.(\"?\w+\"?)", select.split(" FROM ")[0])
    return [c.strip('"') for c in columns if c != "id"]


@pytest.mark.parametrize(
    "table, select, alias",
    [
        (Job._meta.db_table, cluster_rows.JOB_SELECT, "j"),
        (Task._meta.db_table, cluster_rows.TASK_SELECT, "t"),
        (Attempt._meta.db_table, cluster_rows.ATTEMPT_SELECT, "a"),
    ],
)
def test_an_update_of_any_column_the_tick_reads_marks_the_row_changed(table, select, alias):
    cluster(1)
    job = make_job("/alice/train", parent=make_job("/alice"))
    run_tick(NOW_MS)
    pk = {"j": job.pk, "t": Task.objects.get(job=job).pk, "a": Attempt.objects.get(task__job=job).pk}[alias]
    columns = _read_columns(select, alias) + (["parent_id"] if alias == "j" else [])
    assert len(columns) >= 4

    def stamp() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT change_xid FROM {table} WHERE id = %s", [pk])
            return cursor.fetchone()[0]

    for column in columns:
        before = stamp()
        # A job's state set to the live state it has is a live flip, which is not stamped
        # (test_a_live_jobs_flip_keeps_its_stamp_and_its_end_is_stamped): set a finished one.
        value = "'killed'" if (alias, column) == ("j", "state") else f'"{column}"'
        with connection.cursor() as cursor:
            cursor.execute(f'UPDATE {table} SET "{column}" = {value} WHERE id = %s', [pk])
        assert stamp() > before, f"an update of {table}.{column} went unnoticed"
    # A column the tick does not read is no change (a job's route stamp, a task's updated_at).
    other = {"j": "route", "t": "updated_at", "a": "error"}[alias]
    before = stamp()
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE {table} SET "{other}" = "{other}" WHERE id = %s', [pk])
    assert stamp() == before


def test_an_update_of_any_worker_column_the_tick_reads_marks_the_worker_changed_and_a_heartbeat_does_not():
    worker = make_worker("w0", cpu=4, memory_gib=16, rack="r0")
    columns = [
        c.strip() for c in cluster_rows.WORKER_COLUMNS.replace("CAST(attributes AS text)", "attributes").split(",")
    ]
    columns.remove("id")
    assert len(columns) == 9

    def stamp() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT change_xid FROM {Worker._meta.db_table} WHERE id = %s", [worker.pk])
            return cursor.fetchone()[0]

    new_values = {
        "name": "'w9'",
        "healthy": "NOT healthy",
        "draining": "NOT draining",
        "cpu_millicores": "cpu_millicores + 1",
        "memory_bytes": "memory_bytes + 1",
        "device_type": "'gpu'",
        "device_variant": "'h100'",
        "device_count": "device_count + 1",
        "attributes": """'{"rack": "r1"}'::jsonb""",
    }
    assert sorted(new_values) == sorted(columns)
    for column in columns:
        before = stamp()
        with connection.cursor() as cursor:
            cursor.execute(
                f'UPDATE {Worker._meta.db_table} SET "{column}" = {new_values[column]} WHERE id = %s', [worker.pk]
            )
        assert stamp() > before, f"an update of worker.{column} went unnoticed"
    # A heartbeat sets healthy (to what it is) and last_heartbeat: no change the tick reads.
    before = stamp()
    healthy = Worker.objects.get(pk=worker.pk).healthy
    heartbeat("w9", healthy=healthy, now=NOW)
    assert stamp() == before
    heartbeat("w9", healthy=not healthy, now=NOW)
    assert stamp() > before


def test_a_refresh_reads_only_the_workers_that_changed():
    cluster(3)
    read_cluster()
    unchanged = read_cluster()
    assert unchanged.refresh == "changes"
    w1 = Worker.objects.get(name="w1")
    heartbeat("w1", healthy=True, now=NOW)
    assert read_cluster().workers is unchanged.workers  # nothing read changed: the same tuple
    Worker.objects.filter(pk=w1.pk).update(draining=True)
    drained = read_cluster()
    assert [w.id for w in drained.workers] == ["w0", "w1", "w2"]
    assert [w.healthy for w in drained.workers] == [True, False, True]
    assert drained.workers[0] is unchanged.workers[0] and drained.workers[2] is unchanged.workers[2]
    make_worker("v9")
    added = read_cluster()
    assert added.refresh == "changes"
    assert_same(added, read_whole())
    Worker.objects.filter(name="v9").delete()
    assert read_cluster().refresh == "all"


def test_a_live_jobs_flip_keeps_its_stamp_and_its_end_is_stamped():
    """The tick flips a live job between pending and running without a new change stamp, so the
    update writes no index (migration 0025); everything else about the job is stamped as before:
    its end, and a flip that changes any other column the tick reads."""
    cluster(1)
    job = make_job("/alice/train")

    def stamp() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT change_xid FROM {Job._meta.db_table} WHERE id = %s", [job.pk])
            return cursor.fetchone()[0]

    first = stamp()
    Job.objects.filter(pk=job.pk).update(state="running")
    Job.objects.filter(pk=job.pk).update(state="pending")
    assert stamp() == first
    Job.objects.filter(pk=job.pk).update(state="running", max_retries_failure=3)
    assert stamp() > first
    second = stamp()
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    assert stamp() > second
    assert Job.objects.get(pk=job.pk).finished_state == "succeeded"


def test_views_share_the_kept_maps_until_a_change_which_the_earlier_views_never_see():
    """Copy on write: a refresh that found nothing hands the tick the very maps (and tasks'
    tuple) of the previous view, copying nothing; the first change copies them first, so an
    earlier view (and the decision remembered with it) keeps what it saw."""
    cluster(2)
    make_job("/alice/train", replicas=2)
    first = read_cluster()
    seen = (dict(first.jobs), dict(first.job_pks), dict(first.job_states), dict(first.task_rows), first.tasks)

    again = read_cluster()
    assert again.refresh == "changes"
    for name in ("jobs", "job_pks", "job_states", "task_rows", "tasks"):
        assert getattr(again, name) is getattr(first, name), name

    make_job("/bob/eval")
    Task.objects.filter(job__name="/alice/train", index=0).update(state="killed")
    Job.objects.filter(name="/alice/train").update(state="running")
    changed = read_cluster()
    assert changed.refresh == "changes"
    assert "/bob/eval" in changed.jobs and "/bob/eval/0" in changed.task_rows
    # A live job is kept as live (""), whichever of pending and running it is (migration 0025).
    assert "/alice/train/0" not in changed.task_rows and changed.job_states["/alice/train"] == ""
    assert (dict(first.jobs), dict(first.job_pks), dict(first.job_states), dict(first.task_rows), first.tasks) == seen
    assert_same(changed, read_whole())
    # And the next view after the change shares the new maps again.
    assert read_cluster().task_rows is changed.task_rows


def test_a_whole_read_builds_each_worker_as_the_constructor_would_sharing_devices_not_attribute_maps():
    """Workers of one read parse each attributes text and build each device once
    (``WorkerShapes``); each spec still equals the constructor's and owns its attribute map."""
    from scheduler.core.types import WorkerSpec
    from scheduler.store.job_rows import device_from_columns

    rows = [
        (1, "w1", True, False, 4000, 2**30, "tpu", "v5e", 4, '{"zone": "a", "slot": 3}'),
        (2, "w2", True, True, 4000, 2**30, "tpu", "v5e", 4, '{"zone": "a", "slot": 3}'),
        (3, "w3", False, False, 8000, 2**31, "cpu", "", 0, "{}"),
    ]
    shapes = cluster_rows.WorkerShapes()
    specs = [cluster_rows.worker_spec(row, shapes) for row in rows]
    for spec, (_, name, healthy, draining, cpu, mem, dtype, variant, count, _) in zip(specs, rows, strict=True):
        assert spec == cluster_rows.worker_spec(next(r for r in rows if r[1] == name))
        assert spec.id == name and spec.healthy == (healthy and not draining)
        assert spec.device == device_from_columns(dtype, variant, count)
        assert type(spec) is WorkerSpec
    assert specs[0].attributes == {"zone": "a", "slot": "3"} and specs[2].attributes == {}
    assert specs[0].device is specs[1].device
    assert specs[0].attributes is not specs[1].attributes  # each spec's map is its own
    specs[0].attributes["zone"] = "changed"
    assert specs[1].attributes["zone"] == "a"
    assert cluster_rows.worker_spec(rows[0], shapes).attributes["zone"] == "a"
