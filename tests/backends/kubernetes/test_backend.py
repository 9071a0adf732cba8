"""The Kubernetes backend through the real ``kubernetes`` client against a fake API server:
the exact objects it sends, idempotent set-up and starts, status mapping, errors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.backends.base import (
    AttemptRef,
    AttemptStatus,
    BackendError,
    Delivery,
    PermanentBackendError,
    StartOrder,
    StopOrder,
)
from scheduler.backends.kubernetes import KubernetesBackend, classify
from scheduler.foundation.cluster_config import KubernetesConfig, PriorityClassSpec
from scheduler.core.bands import Band
from scheduler.core.types import Device, DeviceType, Resources

PROMOTED_AT = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
GIB = 1 << 30


@pytest.fixture
def backend(kube):
    fake, url = kube
    return KubernetesBackend(KubernetesConfig(enabled=True, api_server=url, request_timeout_seconds=1))


def order(
    task_pk=7,
    attempt=1,
    *,
    band=Band.PRODUCTION,
    replicas=1,
    index=0,
    device=Device(),
    group_by=None,
    job="/alice/train",
    user="alice",
) -> StartOrder:
    return StartOrder(
        ref=AttemptRef(task_pk, attempt),
        task=f"{job}/{index}",
        job=job,
        user=user,
        index=index,
        replicas=replicas,
        worker="kubernetes",
        band=band,
        command=("python", "train.py"),
        environment={"IRIS_TASK_ID": f"{job}/{index}", "IRIS_BAND": band.wire},
        resources=Resources(2000, 8 * GIB, device),
        group_by=group_by,
        created_at=PROMOTED_AT,
    )


# --- set-up ---------------------------------------------------------------------------------------


def test_set_up_creates_the_four_priority_classes_and_workload_priority_classes(kube, backend):
    fake, _ = kube
    backend.ensure_setup()

    classes = fake.objects("priorityclasses")
    assert {name: (c["value"], c["preemptionPolicy"]) for name, c in classes.items()} == {
        "iris-system": (10000, "PreemptLowerPriority"),
        "iris-production": (1000, "PreemptLowerPriority"),
        "iris-interactive": (10, "PreemptLowerPriority"),
        "iris-batch": (0, "Never"),
    }
    assert classes["iris-batch"] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": classes["iris-batch"]["metadata"],
        "value": 0,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "Iris BATCH band",
    }
    workload_classes = fake.objects("workloadpriorityclasses")
    assert {name: c["value"] for name, c in workload_classes.items()} == {
        "iris-system": 10000,
        "iris-production": 1000,
        "iris-interactive": 10,
        "iris-batch": 0,
    }
    assert workload_classes["iris-system"]["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert workload_classes["iris-system"]["kind"] == "WorkloadPriorityClass"


def test_set_up_again_only_reads(kube, backend):
    fake, _ = kube
    backend.ensure_setup()
    fake.clear_requests()

    result = backend.ensure_setup(force=True)

    assert fake.writes() == []
    assert len(result.unchanged) == 8
    # A second process (a fresh backend) makes no writes either.
    fresh = KubernetesBackend(backend.config)
    fresh.ensure_setup()
    assert fake.writes() == []


def test_set_up_replaces_a_class_whose_value_changed_and_updates_a_workload_class(kube, backend):
    fake, url = kube
    backend.ensure_setup()
    fake.clear_requests()
    classes = dict(backend.config.priority_classes)
    classes[Band.INTERACTIVE] = PriorityClassSpec("iris-interactive", 50, "PreemptLowerPriority")
    changed = KubernetesBackend(KubernetesConfig(enabled=True, api_server=url, priority_classes=classes))

    result = changed.ensure_setup()

    assert result.updated == ["PriorityClass iris-interactive", "WorkloadPriorityClass iris-interactive"]
    # value is immutable on a PriorityClass: delete and create; a WorkloadPriorityClass is replaced.
    assert [(r.method, r.path) for r in fake.writes()] == [
        ("DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/iris-interactive"),
        ("POST", "/apis/scheduling.k8s.io/v1/priorityclasses"),
        ("PUT", "/apis/kueue.x-k8s.io/v1beta1/workloadpriorityclasses/iris-interactive"),
    ]
    assert fake.objects("priorityclasses")["iris-interactive"]["value"] == 50
    assert fake.objects("workloadpriorityclasses")["iris-interactive"]["value"] == 50


def test_configured_names_and_values_are_used(kube):
    fake, url = kube
    classes = {
        Band.SYSTEM: PriorityClassSpec("lab-system", 5000, "PreemptLowerPriority"),
        Band.PRODUCTION: PriorityClassSpec("lab-prod", 500, "PreemptLowerPriority"),
        Band.INTERACTIVE: PriorityClassSpec("lab-interactive", 5, "PreemptLowerPriority"),
        Band.BATCH: PriorityClassSpec("lab-batch", -5, "Never"),
    }
    backend = KubernetesBackend(KubernetesConfig(enabled=True, api_server=url, priority_classes=classes))
    backend.start(order(band=Band.BATCH))
    assert sorted(fake.objects("priorityclasses")) == ["lab-batch", "lab-interactive", "lab-prod", "lab-system"]
    pod = fake.pods()["iris-7-1"]
    assert pod["spec"]["priorityClassName"] == "lab-batch"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "lab-batch"


# --- pods and PDBs --------------------------------------------------------------------------------


def test_a_coordinator_pod_and_its_pdb_are_sent_exactly(kube, backend):
    fake, _ = kube
    assert backend.start(order()) is Delivery.DONE

    posts = [r for r in fake.calls("POST") if "priorityclasses" not in r.path]
    assert [r.path for r in posts] == [
        "/apis/policy/v1/namespaces/iris/poddisruptionbudgets",
        "/api/v1/namespaces/iris/pods",
    ]
    assert posts[0].body == {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "iris-7-1",
            "namespace": "iris",
            "labels": {
                "app.kubernetes.io/managed-by": "iris-web",
                "iris.dev/attempt-uid": "7-1",
                "iris.dev/band": "production",
            },
        },
        "spec": {"selector": {"matchLabels": {"iris.dev/attempt-uid": "7-1"}}, "minAvailable": 1},
    }
    assert posts[1].body == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "iris-7-1",
            "namespace": "iris",
            "labels": {
                "app.kubernetes.io/managed-by": "iris-web",
                "iris.dev/attempt-uid": "7-1",
                "iris.dev/task-pk": "7",
                "iris.dev/attempt": "1",
                "iris.dev/band": "production",
                "iris.dev/user": "alice",
                "kueue.x-k8s.io/queue-name": "iris",
                "kueue.x-k8s.io/priority-class": "iris-production",
            },
            "annotations": {"iris.dev/task": "/alice/train/0", "iris.dev/job": "/alice/train"},
        },
        "spec": {
            "restartPolicy": "Never",
            "priorityClassName": "iris-production",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "task",
                    "image": "python:3.12-slim",
                    "env": [
                        {"name": "IRIS_BAND", "value": "production"},
                        {"name": "IRIS_TASK_ID", "value": "/alice/train/0"},
                    ],
                    "resources": {
                        "requests": {"cpu": "2000m", "memory": str(8 * GIB)},
                        "limits": {"memory": str(8 * GIB)},
                    },
                    "command": ["python", "train.py"],
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("band", "budget"),
    [
        (Band.SYSTEM, {"minAvailable": 1}),
        (Band.PRODUCTION, {"minAvailable": 1}),
        (Band.INTERACTIVE, {"maxUnavailable": 1}),
        (Band.BATCH, {"maxUnavailable": 1}),
    ],
)
def test_the_pdb_protects_admin_bands_fully_and_others_by_one(kube, backend, band, budget):
    fake, _ = kube
    backend.start(order(band=band))
    spec = fake.objects("poddisruptionbudgets", "iris")["iris-7-1"]["spec"]
    assert {k: v for k, v in spec.items() if k != "selector"} == budget


def test_accelerator_and_multi_task_jobs_get_no_pdb(kube, backend):
    fake, _ = kube
    backend.start(order(device=Device(DeviceType.GPU, "H100", 8)))
    backend.start(order(task_pk=8, replicas=2))
    assert fake.objects("poddisruptionbudgets", "iris") == {}
    assert sorted(fake.pods()) == ["iris-7-1", "iris-8-1"]


def test_a_gpu_pod_asks_for_its_gpus_on_nodes_of_its_variant(kube, backend):
    fake, _ = kube
    backend.start(order(device=Device(DeviceType.GPU, "H100", 8)))
    pod = fake.pods()["iris-7-1"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}


def test_gang_pods_carry_the_kueue_pod_group_label_and_total_count(kube, backend):
    fake, _ = kube
    for index in range(3):
        backend.start(
            order(
                task_pk=20 + index,
                index=index,
                replicas=3,
                group_by="tpu-name",
                device=Device(DeviceType.GPU, "H100", 8),
                job="/alice/gang",
            )
        )
    pods = fake.pods()
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods.values()}
    assert len(groups) == 1
    (group,) = groups
    assert group.startswith("iris-pg-") and group.endswith(f"-{int(PROMOTED_AT.timestamp() * 1000)}")
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods.values()} == {"3"}


def test_starting_the_same_attempt_twice_creates_one_pod(kube, backend):
    fake, _ = kube
    backend.start(order())
    assert backend.start(order()) is Delivery.DONE
    assert list(fake.pods()) == ["iris-7-1"]
    assert len(fake.calls("POST", "/pods")) == 2  # the second got 409 AlreadyExists


def test_stop_deletes_the_pod_with_the_grace_period_and_its_pdb(kube, backend):
    fake, _ = kube
    backend.start(order())
    result = backend.stop(StopOrder(AttemptRef(7, 1), "/alice/train/0", "kubernetes", "Killed by alice", 12))
    assert result is Delivery.DONE
    assert fake.pods() == {} and fake.objects("poddisruptionbudgets", "iris") == {}
    delete = fake.calls("DELETE", "/pods/iris-7-1")[0]
    assert delete.query.get("gracePeriodSeconds") == ["12"]


def test_stopping_an_attempt_with_no_pod_reports_it_finished(kube, backend):
    assert backend.stop(StopOrder(AttemptRef(9, 1), "t", "kubernetes", "x", 5)) is Delivery.FINISHED


# --- errors ---------------------------------------------------------------------------------------


def test_a_server_error_is_retryable_and_an_invalid_manifest_is_not(kube, backend):
    fake, _ = kube
    backend.ensure_setup()
    fake.fail("POST", "/pods$", status=503)
    with pytest.raises(BackendError) as retryable:
        backend.start(order())
    assert not isinstance(retryable.value, PermanentBackendError)
    assert "HTTP 503" in str(retryable.value)

    fake.fail("POST", "/pods$", status=422)
    with pytest.raises(PermanentBackendError):
        backend.start(order())


def test_a_timeout_is_retryable(kube, backend):
    fake, _ = kube
    backend.ensure_setup()
    fake.fail("POST", "/pods$", status=0, delay=1.5)
    with pytest.raises(BackendError) as error:
        backend.start(order())
    assert "timed out" in str(error.value).lower()


def test_a_disabled_backend_refuses_to_start(kube):
    backend = KubernetesBackend(KubernetesConfig(enabled=False))
    with pytest.raises(PermanentBackendError):
        backend.start(order())


# --- status ---------------------------------------------------------------------------------------


def pod(phase="Pending", conditions=(), reason="", terminated=None) -> dict:
    status: dict = {"phase": phase, "conditions": [dict(c, status="True") for c in conditions]}
    if reason:
        status["reason"] = reason
    if terminated is not None:
        status["containerStatuses"] = [{"name": "task", "state": {"terminated": terminated}}]
    return {"status": status}


@pytest.mark.parametrize(
    ("obj", "status", "code"),
    [
        (pod(), None, None),  # gated: waiting for Kueue to admit it
        (pod(conditions=[{"type": "PodScheduled"}]), AttemptStatus.BUILDING, None),
        (pod("Running"), AttemptStatus.RUNNING, None),
        (pod("Succeeded", terminated={"exitCode": 0}), AttemptStatus.SUCCEEDED, 0),
        (pod("Failed", terminated={"exitCode": 3, "reason": "Error"}), AttemptStatus.FAILED, 3),
        (
            pod("Running", [{"type": "DisruptionTarget", "reason": "PreemptionByScheduler"}]),
            AttemptStatus.PREEMPTED,
            None,
        ),
        (
            pod(
                "Failed",
                [{"type": "DisruptionTarget", "reason": "EvictionByEvictionAPI"}],
                terminated={"exitCode": 137},
            ),
            AttemptStatus.PREEMPTED,
            None,
        ),
        (
            pod("Running", [{"type": "TerminationTarget", "reason": "WorkloadEvictedDueToPreempted"}]),
            AttemptStatus.PREEMPTED,
            None,
        ),
        (
            pod("Running", [{"type": "DisruptionTarget", "reason": "DeletionByTaintManager"}]),
            AttemptStatus.WORKER_LOST,
            None,
        ),
        (pod("Failed", [{"type": "DisruptionTarget", "reason": "DeletionByPodGC"}]), AttemptStatus.WORKER_LOST, None),
        (pod("Failed", reason="NodeLost"), AttemptStatus.WORKER_LOST, None),
    ],
)
def test_pod_status_maps_to_what_happened_to_the_attempt(obj, status, code):
    result = classify(obj)
    assert (result.status, result.exit_code) == (status, code)


def test_a_pod_deleted_before_it_finished_was_preempted():
    assert classify(pod("Running"), deleted=True).status is AttemptStatus.PREEMPTED
    assert classify(pod("Succeeded"), deleted=True).status is AttemptStatus.SUCCEEDED


def test_poll_lists_then_watches_and_reports_each_change_once(kube, backend):
    fake, _ = kube
    backend.start(order())
    first = backend.poll(watch_seconds=1)
    assert first.relisted and first.reports == [] and first.live == {AttemptRef(7, 1)}

    fake.run("iris-7-1")
    second = backend.poll(watch_seconds=1)
    assert not second.relisted
    assert [(r.ref, r.status) for r in second.reports] == [(AttemptRef(7, 1), AttemptStatus.RUNNING)]
    assert fake.calls("GET", "/pods")[-1].query["watch"] == ["true"]

    assert backend.poll(watch_seconds=1).reports == []  # nothing changed

    fake.exit("iris-7-1", 2)
    third = backend.poll(watch_seconds=1)
    assert [(r.status, r.exit_code) for r in third.reports] == [(AttemptStatus.FAILED, 2)]
    assert third.finished == [AttemptRef(7, 1)]
    assert backend.collect(third.finished) == 1
    assert fake.pods() == {} and fake.objects("poddisruptionbudgets", "iris") == {}
    # The deletion that follows is not reported again.
    assert backend.poll(watch_seconds=1).reports == []


def test_a_kueue_eviction_is_reported_as_preempted(kube, backend):
    fake, _ = kube
    backend.start(order())
    backend.poll(watch_seconds=1)
    fake.run("iris-7-1")
    backend.poll(watch_seconds=1)
    fake.evict("iris-7-1")
    result = backend.poll(watch_seconds=1)
    assert [r.status for r in result.reports] == [AttemptStatus.PREEMPTED]
    assert "evicted by Kueue (WorkloadEvictedDueToPreempted)" in result.reports[0].message


def test_a_watch_too_old_relists_and_reports_pods_that_vanished(kube, backend):
    fake, _ = kube
    backend.start(order())
    backend.start(order(task_pk=8))
    backend.poll(watch_seconds=1)
    fake.delete_pod("iris-8-1")
    fake.run("iris-7-1")
    fake.compact()  # the events above are gone from the server's history

    result = backend.poll(watch_seconds=1)

    assert result.relisted
    assert sorted((r.ref.task_pk, r.status) for r in result.reports) == [
        (7, AttemptStatus.RUNNING),
        (8, AttemptStatus.PREEMPTED),
    ]
    assert result.live == {AttemptRef(7, 1)}


def test_a_poll_that_cannot_reach_the_server_raises_a_retryable_error(kube, backend):
    fake, _ = kube
    fake.fail("GET", "/pods$", status=500)
    with pytest.raises(BackendError):
        backend.poll(watch_seconds=1)
