"""What the Kubernetes backend asks the API server to create: pods (with Kueue's labels), their
pod groups' disruption budgets, and the priority classes for the bands."""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from scheduler.backends.base import (
    AttemptRef,
    StartOrder,
)
from scheduler.core.bands import ADMIN_BANDS, Band
from scheduler.core.types import ANY_VARIANT, DeviceType

log = logging.getLogger(__name__)

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "iris-web"
LABEL_UID = "iris.dev/attempt-uid"
LABEL_TASK = "iris.dev/task-pk"
LABEL_ATTEMPT = "iris.dev/attempt"
LABEL_BAND = "iris.dev/band"
LABEL_USER = "iris.dev/user"
ANNOTATION_TASK = "iris.dev/task"
ANNOTATION_JOB = "iris.dev/job"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
WORKLOAD_PRIORITY_CLASSES = "workloadpriorityclasses"
SELECTOR = f"{MANAGED_BY}={MANAGER}"
CONTAINER = "task"
# Pods per list page.
LIST_PAGE = 500
# Seconds one poll watches for changes before returning what it saw.
WATCH_SECONDS = 1

# Disruption reasons that mean the node went away (the pod did not lose a priority contest).
NODE_LOSS_DISRUPTIONS = frozenset({"DeletionByPodGC", "DeletionByTaintManager", "TerminationByKubelet"})
# Pod status reasons that mean infrastructure failed under the pod.
NODE_LOSS_REASONS = frozenset({"NodeLost", "NodeShutdown", "Terminated", "Evicted", "UnexpectedAdmissionError"})
# API statuses that retrying cannot fix.
PERMANENT_STATUSES = frozenset({400, 422})

NOT_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def pod_name(ref: AttemptRef) -> str:
    return f"iris-{ref.uid}"


def label_value(text: str) -> str:
    """``text`` made a valid label value (63 characters of ``[A-Za-z0-9_.-]``, alphanumeric ends)."""
    value = NOT_LABEL_VALUE.sub("-", text)[:63].strip("-_.")
    return value


def pod_group_name(order: StartOrder) -> str:
    """One Kueue pod group per promotion of a gang: every member is promoted in the same tick,
    so the attempts' creation time (the tick's) names the group; the attempt number otherwise."""
    digest = hashlib.sha1(order.job.encode()).hexdigest()[:10]
    generation = int(order.created_at.timestamp() * 1000) if order.created_at else order.ref.attempt
    return f"iris-pg-{digest}-{generation}"


def needs_pdb(order: StartOrder) -> bool:
    """A coordinator: a single-task job asking for no accelerator."""
    return order.replicas == 1 and order.resources.device.type is DeviceType.CPU and order.group_by is None


def pod_manifest(order: StartOrder, config: Any) -> dict[str, Any]:
    """The pod for one attempt, exactly as sent to the API server."""
    classes = config.priority_classes[order.band]
    resources = order.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu_millicores:
        requests["cpu"] = f"{resources.cpu_millicores}m"
    if resources.memory_bytes:
        requests["memory"] = str(resources.memory_bytes)
        limits["memory"] = str(resources.memory_bytes)
    device = resources.device
    node_selector: dict[str, str] = {}
    if device.type is DeviceType.GPU and device.count:
        requests[config.gpu_resource] = str(device.count)
        limits[config.gpu_resource] = str(device.count)
        if device.variant and device.variant != ANY_VARIANT and config.gpu_variant_label:
            node_selector[config.gpu_variant_label] = device.variant
    labels = {
        MANAGED_BY: MANAGER,
        LABEL_UID: order.ref.uid,
        LABEL_TASK: str(order.ref.task_pk),
        LABEL_ATTEMPT: str(order.ref.attempt),
        LABEL_BAND: order.band.wire,
        LABEL_USER: label_value(order.user),
        KUEUE_QUEUE: config.queue_name,
        KUEUE_PRIORITY: classes.name,
    }
    annotations = {ANNOTATION_TASK: order.task, ANNOTATION_JOB: order.job}
    if order.group_by is not None:
        labels[KUEUE_POD_GROUP] = pod_group_name(order)
        annotations[KUEUE_GROUP_COUNT] = str(order.replicas)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": config.image,
        "env": [{"name": k, "value": v} for k, v in sorted(order.environment.items())],
        "resources": {"requests": requests, "limits": limits},
    }
    if order.command:
        container["command"] = list(order.command)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "priorityClassName": classes.name,
        "terminationGracePeriodSeconds": config.termination_grace_seconds,
        "containers": [container],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if config.service_account:
        spec["serviceAccountName"] = config.service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(order.ref),
            "namespace": config.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def pdb_manifest(order: StartOrder, config: Any) -> dict[str, Any]:
    """The PodDisruptionBudget protecting a coordinator pod."""
    spec: dict[str, Any] = {"selector": {"matchLabels": {LABEL_UID: order.ref.uid}}}
    if order.band in ADMIN_BANDS:
        spec["minAvailable"] = 1
    else:
        spec["maxUnavailable"] = 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pod_name(order.ref),
            "namespace": config.namespace,
            "labels": {MANAGED_BY: MANAGER, LABEL_UID: order.ref.uid, LABEL_BAND: order.band.wire},
        },
        "spec": spec,
    }


def priority_class_manifest(band: Band, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": spec.name, "labels": {MANAGED_BY: MANAGER}},
        "value": spec.value,
        "preemptionPolicy": spec.preemption_policy,
        "globalDefault": False,
        "description": f"Iris {band.name} band",
    }


def workload_priority_class_manifest(band: Band, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": spec.name, "labels": {MANAGED_BY: MANAGER}},
        "value": spec.value,
        "description": f"Iris {band.name} band",
    }
