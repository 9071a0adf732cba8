"""Kubernetes end to end against the database and a fake API server: routing, the tick's capped
promotions, pods created by the dispatcher, status flowing back (a Kueue eviction becomes
PREEMPTED and retried), cancelling, and API errors that leave every task retryable."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.board.read import queue_index
from scheduler.core.bands import Band
from scheduler.core.explain import cause_text
from scheduler.execution.dispatcher import drain
from scheduler.jobs.cancel import cancel_job
from scheduler.models import Attempt, BackendState, DispatchIntent, Job, Task, TickRecord, UserBudget, Worker
from scheduler.provisioning.health import backend_status
from scheduler.provisioning.kubernetes import sync_kubernetes
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_user, make_worker, submit

pytestmark = pytest.mark.django_db

H100 = ("gpu", "H100", 8)
MINUTE_MS = 60_000


@pytest.fixture
def cluster(kube, cluster_config):
    """A Kubernetes cluster set up by a first sync, and one local CPU host."""
    fake, _ = kube
    make_worker("cpu1", cpu=16, memory_gib=64)
    sync_kubernetes(watch_seconds=1)
    fake.clear_requests()
    return fake


def sync():
    return sync_kubernetes(watch_seconds=1)


def task_of(job: Job, index: int = 0) -> Task:
    return Task.objects.get(job=job, index=index)


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


# --- routing and promotion ------------------------------------------------------------------------


def test_a_gpu_job_no_worker_serves_goes_to_kubernetes_and_becomes_a_pod(cluster):
    gpu = make_job("/alice/train", device=H100, band=Band.PRODUCTION)
    cpu = make_job("/alice/prep")

    run_tick(NOW_MS)

    gpu.refresh_from_db()
    cpu.refresh_from_db()
    assert (gpu.route, cpu.route) == ("kubernetes", "workers")
    task = task_of(gpu)
    kube_worker = Worker.objects.get(name="kubernetes")
    assert (task.state, task.worker_id, task.band) == ("assigned", kube_worker.pk, Band.PRODUCTION)
    assert task_of(cpu).worker.name == "cpu1"

    drain()

    pod = cluster.pods()[f"iris-{task.pk}-1"]
    assert pod["spec"]["priorityClassName"] == "iris-production"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "iris"
    assert DispatchIntent.objects.get(task=task, kind="start").state == "done"


def test_submission_stamps_the_routes_no_worker_can_change_and_leaves_the_rest_to_the_tick(kube, cluster_config):
    cluster_config(tpu=False, scale_groups=[])  # no TPU scale group either: nothing here serves a CPU job
    alice = make_user("alice")
    tpu = submit(alice, "tpu", device={"type": "tpu", "variant": "v5p-8", "count": 4})  # Kubernetes takes no TPU
    pinned = submit(alice, "pinned", constraints=[{"key": "backend", "op": "eq", "value": "kubernetes"}])
    cpu = submit(alice, "cpu")  # Kubernetes takes CPU work: depends on the hosts the tick sees
    assert (tpu.route, pinned.route, cpu.route) == ("workers", "kubernetes", "")

    run_tick(NOW_MS)  # no local host: the CPU job goes to Kubernetes; the stamped routes stay
    assert dict(Job.objects.values_list("name", "route")) == {
        "/alice/tpu": "workers",
        "/alice/pinned": "kubernetes",
        "/alice/cpu": "kubernetes",
    }

    cluster_config(kubernetes=False)
    assert submit(alice, "later").route == "workers"


def test_the_tick_promotes_at_most_the_cap_per_minute(kube, cluster_config):
    cluster_config(kubernetes={"promotions_per_minute": 5})
    sync_kubernetes(watch_seconds=1)
    jobs = [make_job(f"/alice/j{i}", device=H100) for i in range(8)]

    run_tick(NOW_MS)
    assert Task.objects.filter(state="assigned").count() == 5
    run_tick(NOW_MS + 1)
    assert Task.objects.filter(state="assigned").count() == 5
    run_tick(NOW_MS + 36_000)  # 36 s refill 3 tokens
    assert Task.objects.filter(state="assigned").count() == 8
    assert [task_of(j).state for j in jobs] == ["assigned"] * 8
    state = BackendState.objects.get(name="kubernetes")
    assert state.tokens == 0 and state.tokens_at_ms == NOW_MS + 36_000


def test_the_tick_record_counts_pending_tasks_routed_to_kubernetes_too(kube, cluster_config):
    cluster_config(kubernetes={"promotions_per_minute": 5})
    sync_kubernetes(watch_seconds=1)
    for i in range(3):
        make_job(f"/alice/gpu{i}", device=H100, replicas=2)  # routed to Kubernetes: Kueue admits them
    make_job("/alice/cpu", replicas=4)  # no worker: stays pending in the core's queue

    run_tick(NOW_MS)
    assert TickRecord.objects.latest("pk").pending == 6 + 4  # pending when the tick started
    run_tick(NOW_MS + 1)  # 5 promoted, 1 left waiting for the rate cap
    assert TickRecord.objects.latest("pk").pending == 1 + 4


def test_waiting_tasks_are_explained_in_the_queue(kube, cluster_config):
    cluster_config(kubernetes={"promotions_per_minute": 1})
    sync_kubernetes(watch_seconds=1)
    make_job("/alice/a", device=H100)
    make_job("/alice/b", device=H100)

    run_tick(NOW_MS)

    record = queue_index().locate("/alice/b/0").reason
    assert record["code"] == "rate_cap"
    assert cause_text(record) == "Kubernetes promotion rate cap: 0 of 1 pods left this minute"


def test_a_gang_is_promoted_whole_into_one_kueue_pod_group(cluster):
    gang = make_job("/alice/gang", device=H100, replicas=3, group_by="rack")

    run_tick(NOW_MS)
    drain()

    assert sorted(Task.objects.filter(job=gang).values_list("state", flat=True)) == ["assigned"] * 3
    pods = cluster.pods().values()
    assert len({p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods}) == 1
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods} == {"3"}


def test_statements_per_tick_do_not_grow_with_kubernetes_tasks(kube, cluster_config):
    cluster_config(kubernetes={"promotions_per_minute": 1000})
    sync_kubernetes(watch_seconds=1)

    def statements(n: int, offset: int) -> int:
        for i in range(n):
            make_job(f"/alice/n{offset}-{i}", device=H100)
        with CaptureQueriesContext(connection) as queries:
            run_tick(NOW_MS + offset)
        return len(queries)

    run_tick(NOW_MS - MINUTE_MS)  # the lease rows exist from now on, as in any running cluster
    assert statements(5, 0) == statements(40, MINUTE_MS)


def test_a_disabled_kubernetes_backend_takes_no_jobs(kube, cluster_config):
    cluster_config(kubernetes={"enabled": False})
    sync_kubernetes(watch_seconds=1)
    gpu = make_job("/alice/train", device=H100)

    run_tick(NOW_MS)

    gpu.refresh_from_db()
    assert gpu.route == "workers"
    assert task_of(gpu).state == "pending"
    assert BackendState.objects.get(name="kubernetes").enabled is False


# --- status flowing back --------------------------------------------------------------------------


def promote_and_run(cluster, job: Job, index: int = 0) -> Task:
    run_tick(NOW_MS)
    drain()
    task = task_of(job, index)
    sync()
    cluster.run(f"iris-{task.pk}-{task.attempt_count}")
    sync()
    task.refresh_from_db()
    return task


def test_running_then_succeeded_finishes_the_task_and_removes_the_pod(cluster):
    job = make_job("/alice/train", device=H100)
    task = promote_and_run(cluster, job)
    assert task.state == "running"

    cluster.exit(f"iris-{task.pk}-1", 0)
    sync()

    task.refresh_from_db()
    job.refresh_from_db()
    assert (task.state, job.state) == ("succeeded", "succeeded")
    attempt = Attempt.objects.get(task=task)
    assert (attempt.state, attempt.exit_code) == ("succeeded", 0) and attempt.finished_at is not None
    assert cluster.pods() == {}


def test_a_failed_pod_records_its_exit_code(cluster):
    job = make_job("/alice/train", device=H100)
    task = promote_and_run(cluster, job)
    cluster.exit(f"iris-{task.pk}-1", 3)
    sync()

    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert (task.state, attempt.state, attempt.exit_code) == ("failed", "failed", 3)
    assert "exited with code 3" in attempt.error


def test_a_kueue_eviction_is_preempted_and_the_task_retried_in_a_new_pod(cluster):
    job = make_job("/alice/train", device=H100)
    task = promote_and_run(cluster, job)

    cluster.evict(f"iris-{task.pk}-1")
    sync()

    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task, number=1)
    assert (task.state, task.preemption_count, task.band) == ("pending", 1, None)
    assert attempt.state == "preempted" and attempt.finished_at is not None
    assert "evicted by Kueue" in attempt.error
    assert f"iris-{task.pk}-1" not in cluster.pods()

    run_tick(NOW_MS + MINUTE_MS)
    drain()

    task.refresh_from_db()
    assert (task.state, task.attempt_count) == ("assigned", 2)
    assert f"iris-{task.pk}-2" in cluster.pods()


def test_an_eviction_past_max_retries_preemption_ends_the_task_preempted(cluster):
    job = make_job("/alice/train", device=H100)
    Job.objects.filter(pk=job.pk).update(max_retries_preemption=0)
    task = promote_and_run(cluster, job)

    cluster.evict(f"iris-{task.pk}-1")
    sync()

    task.refresh_from_db()
    job.refresh_from_db()
    assert (task.state, job.state) == ("preempted", "preempted")


def test_node_loss_is_a_worker_failure(cluster):
    job = make_job("/alice/train", device=H100)
    Job.objects.filter(pk=job.pk).update(max_retries_preemption=0)
    task = promote_and_run(cluster, job)

    cluster.set_pod_status(
        f"iris-{task.pk}-1",
        {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}],
        },
    )
    sync()

    task.refresh_from_db()
    assert task.state == "worker_failed"
    assert Attempt.objects.get(task=task).state == "worker_failed"


def test_a_redrive_keeps_the_band_stamped_at_promotion(cluster):
    job = make_job("/alice/train", device=H100)
    cluster.fail("POST", "/pods$", status=503)
    run_tick(NOW_MS)
    drain()  # the first try fails
    task = task_of(job)
    assert task.band == Band.INTERACTIVE
    # alice is now far over a tiny budget: new work would be BATCH, but this attempt keeps its band.
    UserBudget.objects.create(user_id="alice", budget_limit=1, max_band=Band.INTERACTIVE)

    drain(now=later(60))

    pod = cluster.pods()[f"iris-{task.pk}-1"]
    assert pod["spec"]["priorityClassName"] == "iris-interactive"


# --- cancelling -----------------------------------------------------------------------------------


def test_cancelling_a_job_deletes_its_pods_and_pdbs(cluster):
    alice = get_user_model().objects.create_user("alice")
    job = make_job("/alice/coordinator")
    Job.objects.filter(pk=job.pk).update(route="kubernetes")
    task = promote_and_run(cluster, job)
    assert cluster.objects("poddisruptionbudgets", "iris")

    cancel_job(alice, "/alice/coordinator")
    drain()
    assert cluster.pods() == {} and cluster.objects("poddisruptionbudgets", "iris") == {}

    sync()  # the deletion is seen: the attempt has finished
    attempt = Attempt.objects.get(task=task)
    assert attempt.state == "killed" and attempt.finished_at is not None


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [{"status": 500}, {"status": 0, "delay": 3}])
def test_an_api_error_or_timeout_leaves_the_task_assigned_and_the_start_retried(cluster, fault):
    job = make_job("/alice/train", device=H100)
    run_tick(NOW_MS)
    cluster.fail("POST", "/pods$", **fault)

    result = drain()

    task = task_of(job)
    intent = DispatchIntent.objects.get(task=task, kind="start")
    assert result.retried == 1
    assert (task.state, intent.state, intent.tries) == ("assigned", "pending", 1)
    assert intent.last_error.startswith("BackendError")
    assert Attempt.objects.get(task=task).finished_at is None

    drain(now=later(60))

    intent.refresh_from_db()
    assert intent.state == "done"
    assert list(cluster.pods()) == [f"iris-{task.pk}-1"]


def test_a_start_that_keeps_failing_ends_the_attempt_and_the_task_is_promoted_again(cluster, settings):
    settings.DISPATCH_MAX_TRIES = 1
    job = make_job("/alice/train", device=H100)
    run_tick(NOW_MS)
    cluster.fail("POST", "/pods$", status=500)

    drain()

    task = task_of(job)
    assert (task.state, task.preemption_count) == ("pending", 1)
    assert DispatchIntent.objects.get(task=task, kind="start").state == "failed"

    run_tick(NOW_MS + MINUTE_MS)
    drain()
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == ("assigned", 2)
    assert list(cluster.pods()) == [f"iris-{task.pk}-2"]


def test_a_failing_sync_marks_the_backend_unhealthy_and_holds_promotions(cluster):
    cluster.fail("GET", "/pods$", status=503, times=1)

    outcome = sync()

    assert "HTTP 503" in outcome.error
    state = BackendState.objects.get(name="kubernetes")
    assert (state.healthy, state.consecutive_errors) == (False, 1)
    assert "HTTP 503" in state.last_error
    assert Worker.objects.get(name="kubernetes").healthy is False
    job = make_job("/alice/train", device=H100)
    run_tick(NOW_MS)
    assert task_of(job).state == "pending"
    reason = cause_text(queue_index().locate("/alice/train/0").reason)
    assert reason.startswith("Kubernetes backend not ready: unhealthy: ")

    sync()  # the API answers again
    state.refresh_from_db()
    assert (state.healthy, state.consecutive_errors) == (True, 0)
    run_tick(NOW_MS + 1)
    assert task_of(job).state == "assigned"


def test_a_pod_that_vanished_while_nobody_watched_ends_its_attempt(cluster):
    job = make_job("/alice/train", device=H100)
    task = promote_and_run(cluster, job)
    # The pod disappears while no process watches (a fresh process has no memory of it).
    DispatchIntent.objects.filter(task=task).update(updated_at=timezone.now() - timedelta(minutes=5))
    with cluster.cond:
        cluster.store[("pods", "iris")].pop(f"iris-{task.pk}-1")
    from scheduler import backends

    backends.unregister_backend("kubernetes")

    sync()

    task.refresh_from_db()
    assert (task.state, task.preemption_count) == ("pending", 1)
    assert Attempt.objects.get(task=task).error == "pod disappeared"


def test_backend_status_lists_health_last_sync_and_errors(cluster):
    cluster.fail("GET", "/pods$", status=500)
    sync()
    status = {s.name: s for s in backend_status()}
    assert status["kubernetes"].healthy is False
    assert status["kubernetes"].last_sync_at is not None
    assert "HTTP 500" in status["kubernetes"].last_error
    assert status["local"].healthy is True and status["local"].workers == 1


def test_a_kueue_eviction_of_a_gang_requeues_it_whole_and_it_is_promoted_again_whole(cluster):
    gang = make_job("/alice/gang", device=H100, replicas=2, group_by="rack")
    run_tick(NOW_MS)
    drain()
    sync()
    tasks = list(Task.objects.filter(job=gang).order_by("index"))
    for task in tasks:
        cluster.run(f"iris-{task.pk}-1")
    sync()

    cluster.evict(f"iris-{tasks[0].pk}-1")  # Kueue evicts the workload: the first pod is seen first
    sync()
    drain()  # the requeued sibling's pod is deleted
    sync()

    states = list(Task.objects.filter(job=gang).order_by("index").values_list("state", "preemption_count"))
    assert states == [("pending", 1), ("pending", 0)]
    assert cluster.pods() == {}
    assert Attempt.objects.filter(task__job=gang, finished_at__isnull=True).count() == 0

    run_tick(NOW_MS + MINUTE_MS)
    drain()
    pods = cluster.pods()
    assert sorted(pods) == sorted(f"iris-{t.pk}-2" for t in tasks)
    assert len({p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods.values()}) == 1


def test_a_stop_that_fails_is_retried_and_the_attempt_holds_until_the_pod_is_gone(cluster):
    alice = get_user_model().objects.create_user("alice")
    job = make_job("/alice/train", device=H100)
    task = promote_and_run(cluster, job)
    cluster.fail("DELETE", "/pods/", status=500)

    cancel_job(alice, "/alice/train")
    result = drain()

    stop = DispatchIntent.objects.get(task=task, kind="stop")
    assert (result.retried, stop.state) == (1, "pending")
    assert Attempt.objects.get(task=task).finished_at is None
    assert f"iris-{task.pk}-1" in cluster.pods()

    drain(now=later(60))
    sync()

    assert cluster.pods() == {}
    assert Attempt.objects.get(task=task).finished_at is not None


def test_the_ticks_active_counts_include_the_tasks_it_promoted_to_kubernetes(kube, cluster_config):
    """The scheduler page's running counts (scheduler.board.counts) count the Kueue
    promotions the tick just wrote, as the live grouped count over the task table does."""
    from scheduler.board.read import queue_index
    from scheduler.tick.queries import running_by_band_user, task_counts_by_state

    cluster_config(kubernetes={"promotions_per_minute": 5})
    sync_kubernetes(watch_seconds=1)
    for i in range(3):
        make_job(f"/alice/gpu{i}", device=H100, replicas=2)
    run_tick(NOW_MS)
    index = queue_index()
    assert sum(index.running.values()) == 5
    assert index.running == running_by_band_user()
    assert index.active_by_state == {"assigned": task_counts_by_state()["assigned"]}
    # The budgets pages' per-user counts: the promoted tasks active, the rest still pending.
    assert tuple(index.by_user["alice"]) == (1, 5, 3)
