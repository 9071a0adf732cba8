"""The Kubernetes/Kueue backend: task attempts run as pods that Kueue admits.

Our tick does not place these tasks. It promotes pending tasks routed here to ASSIGNED at a
capped rate (``scheduler.core.kueue``), on the worker row that stands for the cluster, with the
effective band stamped; the dispatcher then calls :meth:`KubernetesBackend.start`, which creates
one pod per attempt through the official ``kubernetes`` client:

- ``priorityClassName`` and the Kueue label ``kueue.x-k8s.io/priority-class`` name the classes of
  the band stamped on the attempt (so a redrive of the same attempt keeps its band), and
  ``kueue.x-k8s.io/queue-name`` the LocalQueue;
- a gang's pods carry Kueue's pod-group label ``kueue.x-k8s.io/pod-group-name`` (one name per
  promotion of the gang) and the annotation ``kueue.x-k8s.io/pod-group-total-count``;
- a single-task CPU-only job (a coordinator) also gets a PodDisruptionBudget: ``minAvailable: 1``
  for SYSTEM and PRODUCTION, ``maxUnavailable: 1`` for INTERACTIVE and BATCH.

Pods and PDBs are named after the attempt (``iris-<task pk>-<attempt>``), so a repeated start
finds them already there (409) and starts nothing twice. :meth:`stop` deletes both.

Set-up (:meth:`ensure_setup`, create-or-update, idempotent) makes the PriorityClasses and the
matching Kueue WorkloadPriorityClasses exist with the configured values; a PriorityClass's value
and preemption policy are immutable in Kubernetes, so a changed one is deleted and re-created.

Status comes back through :meth:`poll` (list, then watch from the list's resourceVersion; a
relist after 410 Gone), classified by :func:`classify`: running, succeeded, failed with the exit
code; a ``DisruptionTarget`` condition or a Kueue eviction (``TerminationTarget`` with reason
``WorkloadEvicted*``) is PREEMPTED; node loss (``DeletionByPodGC``, ``DeletionByTaintManager``,
``TerminationByKubelet``, or a pod reason such as ``NodeLost``) is WORKER_LOST; a pod deleted
before it finished is PREEMPTED. ``scheduler.provisioning.sync_kubernetes`` drives the polling,
applies the reports, removes finished pods (:meth:`collect`) and records the backend's health;
so this backend does not implement the generic :meth:`Backend.sync`, and the cluster is not
read twice.

API errors never write anything: a timeout, a connection error, a 5xx, 403, 404 or 429 raises
:class:`BackendError` (the dispatcher retries with backoff); 400 and 422 (an invalid manifest)
raise :class:`PermanentBackendError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from scheduler.backends.base import (
    AttemptRef,
    AttemptReport,
    AttemptStatus,
    Backend,
    BackendError,
    Delivery,
    PermanentBackendError,
    StartOrder,
    StopOrder,
)
from scheduler.cluster_config import cluster_config
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


# --- status ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodStatus:
    status: AttemptStatus | None  # None: waiting for admission (nothing to report yet)
    exit_code: int | None = None
    message: str = ""


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = pod.get("status") or {}
    return {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for item in statuses:
        if item.get("name") == CONTAINER or len(statuses) == 1:
            terminated = (item.get("state") or {}).get("terminated")
            if terminated:
                return terminated
    return None


def classify(pod: Mapping[str, Any], *, deleted: bool = False) -> PodStatus:
    """What a pod (camelCase, as the API serves it) says about its attempt."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    conditions = _conditions(pod)
    kueue = conditions.get("TerminationTarget")
    disruption = conditions.get("DisruptionTarget")
    for condition in (kueue, disruption):
        if condition and str(condition.get("reason", "")).startswith("WorkloadEvicted"):
            return PodStatus(AttemptStatus.PREEMPTED, None, f"evicted by Kueue ({condition.get('reason')}): "
                                                            f"{condition.get('message', '')}".rstrip(": "))
    if disruption and disruption.get("reason") in NODE_LOSS_DISRUPTIONS:
        return PodStatus(AttemptStatus.WORKER_LOST, None, f"node lost ({disruption.get('reason')})")
    if status.get("reason") in NODE_LOSS_REASONS:
        return PodStatus(AttemptStatus.WORKER_LOST, None, f"node lost ({status.get('reason')}): "
                                                          f"{status.get('message', '')}".rstrip(": "))
    if disruption:
        return PodStatus(AttemptStatus.PREEMPTED, None, f"preempted ({disruption.get('reason')})")
    terminated = _terminated(pod)
    if phase == "Succeeded":
        return PodStatus(AttemptStatus.SUCCEEDED, 0)
    if phase == "Failed":
        code = terminated.get("exitCode") if terminated else None
        reason = (terminated or {}).get("reason") or status.get("reason") or "Error"
        text = f"exited with code {code} ({reason})" if code is not None else f"pod failed ({reason})"
        return PodStatus(AttemptStatus.FAILED, code, text)
    if deleted:
        return PodStatus(AttemptStatus.PREEMPTED, None, "pod deleted before it finished")
    if phase == "Running":
        return PodStatus(AttemptStatus.RUNNING)
    if "PodScheduled" in conditions:
        return PodStatus(AttemptStatus.BUILDING)
    return PodStatus(None)


def attempt_of(pod: Mapping[str, Any]) -> AttemptRef | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return AttemptRef(int(labels[LABEL_TASK]), int(labels[LABEL_ATTEMPT]))
    except (KeyError, ValueError):
        return None


# --- the backend ----------------------------------------------------------------------------------


@dataclass
class PollResult:
    """What one :meth:`KubernetesBackend.poll` saw.

    ``reports`` are status changes since the last poll; ``live`` every managed pod's attempt
    (complete once a list has been made); ``finished`` attempts whose pods ended and may be
    removed once their reports are applied; ``relisted`` whether this poll listed from scratch.
    """

    reports: list[AttemptReport] = field(default_factory=list)
    live: set[AttemptRef] = field(default_factory=set)
    finished: list[AttemptRef] = field(default_factory=list)
    relisted: bool = False


@dataclass
class SetupResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def api_error(exc: BaseException, what: str) -> BackendError:
    """The backend error for a failed API call: permanent for an invalid request, else retried."""
    if isinstance(exc, ApiException):
        text = f"{what}: HTTP {exc.status} {exc.reason or ''}".strip()
        body = (exc.body or "")[:300] if isinstance(exc.body, str) else ""
        if body:
            text = f"{text}: {body}"
        if exc.status in PERMANENT_STATUSES:
            return PermanentBackendError(text)
        return BackendError(text)
    return BackendError(f"{what}: {type(exc).__name__}: {exc}")


API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, k8s_config.ConfigException)


class KubernetesBackend(Backend):
    name = "kubernetes"
    heartbeats = False

    def __init__(self, config: Any = None) -> None:
        self._fixed_config = config
        self._lock = threading.RLock()
        self._api_for: Any = None
        self._api: k8s.ApiClient | None = None
        self._setup_for: Any = None
        self._resource_version: str | None = None
        self._pods: dict[AttemptRef, PodStatus] = {}
        self._reported: dict[AttemptRef, AttemptStatus] = {}
        self._uncollected: set[AttemptRef] = set()

    # -- configuration and clients -----------------------------------------------------------------

    @property
    def config(self):
        if self._fixed_config is not None:
            return self._fixed_config
        return cluster_config().kubernetes

    def api_client(self) -> k8s.ApiClient:
        """The API client for the current config (rebuilt when the config changes)."""
        config = self.config
        with self._lock:
            if self._api is not None and self._api_for == config:
                return self._api
            configuration = k8s.Configuration()
            try:
                if config.api_server:
                    configuration.host = config.api_server.rstrip("/")
                elif config.in_cluster:
                    k8s_config.load_incluster_config(client_configuration=configuration)
                else:
                    k8s_config.load_kube_config(
                        config_file=config.kubeconfig or None,
                        context=config.context or None,
                        client_configuration=configuration,
                        persist_config=False,
                    )
            except (k8s_config.ConfigException, OSError) as exc:
                raise BackendError(f"cannot load Kubernetes credentials: {exc}") from exc
            # Fail fast: the dispatcher and the next poll retry with backoff.
            configuration.retries = False
            self._api = k8s.ApiClient(configuration)
            self._api_for = config
            self._setup_for = None
            self._resource_version = None
            return self._api

    def _timeout(self) -> float:
        return self.config.request_timeout_seconds

    def reset(self) -> None:
        """Forget clients and what was seen (tests; a config change does this by itself)."""
        with self._lock:
            self._api = None
            self._api_for = None
            self._setup_for = None
            self._resource_version = None
            self._pods.clear()
            self._reported.clear()
            self._uncollected.clear()

    # -- set-up ------------------------------------------------------------------------------------

    def ensure_setup(self, *, force: bool = False) -> SetupResult:
        """Create or update the PriorityClasses and Kueue WorkloadPriorityClasses (idempotent).

        Done once per process and config (``force`` to check again); raises BackendError.
        """
        config = self.config
        if not config.enabled:
            raise PermanentBackendError("the Kubernetes backend is disabled in the cluster config")
        api = self.api_client()
        with self._lock:
            if not force and self._setup_for == config:
                return SetupResult()
            result = SetupResult()
            scheduling = k8s.SchedulingV1Api(api)
            custom = k8s.CustomObjectsApi(api)
            timeout = self._timeout()
            for band in sorted(config.priority_classes):
                spec = config.priority_classes[band]
                self._ensure_priority_class(scheduling, band, spec, timeout, result)
                self._ensure_workload_priority_class(custom, band, spec, timeout, result)
            self._setup_for = config
            if result.created or result.updated:
                log.info("kubernetes set-up: created %s, updated %s", result.created, result.updated)
            return result

    def _ensure_priority_class(self, api: k8s.SchedulingV1Api, band: Band, spec: Any, timeout: float,
                               result: SetupResult) -> None:
        body = priority_class_manifest(band, spec)
        what = f"PriorityClass {spec.name}"
        try:
            try:
                existing = api.read_priority_class(spec.name, _request_timeout=timeout)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                existing = None
            if existing is None:
                self._create(lambda: api.create_priority_class(body, _request_timeout=timeout))
                result.created.append(what)
            elif existing.value != spec.value or (existing.preemption_policy or "PreemptLowerPriority") != spec.preemption_policy:
                # value and preemptionPolicy are immutable: replace the class.
                api.delete_priority_class(spec.name, _request_timeout=timeout)
                self._create(lambda: api.create_priority_class(body, _request_timeout=timeout))
                result.updated.append(what)
            elif existing.description != body["description"] or (existing.metadata.labels or {}).get(MANAGED_BY) != MANAGER:
                api.patch_priority_class(
                    spec.name,
                    {"metadata": {"labels": body["metadata"]["labels"]}, "description": body["description"]},
                    _request_timeout=timeout,
                )
                result.updated.append(what)
            else:
                result.unchanged.append(what)
        except API_ERRORS as exc:
            raise api_error(exc, f"ensuring {what}") from exc

    def _ensure_workload_priority_class(self, api: k8s.CustomObjectsApi, band: Band, spec: Any, timeout: float,
                                        result: SetupResult) -> None:
        body = workload_priority_class_manifest(band, spec)
        what = f"WorkloadPriorityClass {spec.name}"
        args = (KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PRIORITY_CLASSES)
        try:
            try:
                existing = api.get_cluster_custom_object(*args, spec.name, _request_timeout=timeout)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                existing = None
            if existing is None:
                self._create(lambda: api.create_cluster_custom_object(*args, body, _request_timeout=timeout))
                result.created.append(what)
            elif existing.get("value") != spec.value or existing.get("description") != body["description"]:
                replacement = dict(body)
                replacement["metadata"] = {
                    **body["metadata"],
                    "resourceVersion": (existing.get("metadata") or {}).get("resourceVersion"),
                }
                api.replace_cluster_custom_object(*args, spec.name, replacement, _request_timeout=timeout)
                result.updated.append(what)
            else:
                result.unchanged.append(what)
        except API_ERRORS as exc:
            raise api_error(exc, f"ensuring {what}") from exc

    @staticmethod
    def _create(call) -> bool:
        """Create; an object that already exists (409) counts as created. True if this call made it."""
        try:
            call()
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    # -- the contract ------------------------------------------------------------------------------

    def start(self, order: StartOrder) -> Delivery:
        """Create the attempt's PDB (coordinators only) and pod; both may already exist."""
        config = self.config
        if not config.enabled:
            raise PermanentBackendError("the Kubernetes backend is disabled in the cluster config")
        if order.band not in config.priority_classes:
            raise PermanentBackendError(f"no priority class for band {order.band.name}")
        self.ensure_setup()
        api = self.api_client()
        timeout = self._timeout()
        namespace = config.namespace
        if needs_pdb(order):
            policy = k8s.PolicyV1Api(api)
            body = pdb_manifest(order, config)
            try:
                self._create(
                    lambda: policy.create_namespaced_pod_disruption_budget(namespace, body, _request_timeout=timeout)
                )
            except API_ERRORS as exc:
                raise api_error(exc, f"creating PodDisruptionBudget {body['metadata']['name']}") from exc
        core = k8s.CoreV1Api(api)
        body = pod_manifest(order, config)
        try:
            created = self._create(lambda: core.create_namespaced_pod(namespace, body, _request_timeout=timeout))
        except API_ERRORS as exc:
            raise api_error(exc, f"creating pod {body['metadata']['name']}") from exc
        if created:
            log.info("pod %s created for %s (%s)", body["metadata"]["name"], order.task, order.band.name)
        return Delivery.DONE

    def stop(self, order: StopOrder) -> Delivery:
        """Delete the attempt's pod (with the grace period) and PDB. FINISHED when no pod exists."""
        config = self.config
        if not config.enabled:
            # Nothing of ours can be reached; the attempt is over as far as we can tell.
            return Delivery.FINISHED
        api = self.api_client()
        timeout = self._timeout()
        name = pod_name(order.ref)
        core = k8s.CoreV1Api(api)
        gone = False
        try:
            core.delete_namespaced_pod(
                name, config.namespace, grace_period_seconds=int(order.grace_seconds), _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"deleting pod {name}") from exc
            gone = True
        except API_ERRORS as exc:
            raise api_error(exc, f"deleting pod {name}") from exc
        self._delete_pdb(api, name, timeout)
        return Delivery.FINISHED if gone else Delivery.DONE

    def _delete_pdb(self, api: k8s.ApiClient, name: str, timeout: float) -> None:
        try:
            k8s.PolicyV1Api(api).delete_namespaced_pod_disruption_budget(
                name, self.config.namespace, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"deleting PodDisruptionBudget {name}") from exc
        except API_ERRORS as exc:
            raise api_error(exc, f"deleting PodDisruptionBudget {name}") from exc

    # -- status ------------------------------------------------------------------------------------

    def poll(self, now: datetime | None = None, *, watch_seconds: int = WATCH_SECONDS) -> PollResult:
        """Status changes since the last poll: a full list the first time (and after 410 Gone),
        then a watch from the last resourceVersion for ``watch_seconds``. Raises BackendError."""
        config = self.config
        api = self.api_client()
        core = k8s.CoreV1Api(api)
        result = PollResult()
        with self._lock:
            try:
                if self._resource_version is None:
                    self._relist(core, config, result)
                else:
                    try:
                        self._watch(core, config, result, watch_seconds)
                    except ApiException as exc:
                        if exc.status != 410:
                            raise
                        log.info("kubernetes watch expired (410 Gone); listing again")
                        self._resource_version = None
                        self._relist(core, config, result)
            except API_ERRORS as exc:
                raise api_error(exc, "reading pods") from exc
            result.live = set(self._pods)
            result.finished = sorted(self._uncollected, key=lambda r: (r.task_pk, r.attempt))
        return result

    def _relist(self, core: k8s.CoreV1Api, config: Any, result: PollResult) -> None:
        seen: dict[AttemptRef, dict] = {}
        token = None
        version = None
        while True:
            kwargs: dict[str, Any] = {"label_selector": SELECTOR, "limit": LIST_PAGE, "_request_timeout": self._timeout()}
            if token:
                kwargs["_continue"] = token
            # Raw JSON: status is read as the server sends it, whatever the client's models expect.
            response = core.list_namespaced_pod(config.namespace, _preload_content=False, **kwargs)
            page = json.loads(response.data)
            metadata = page.get("metadata") or {}
            version = metadata.get("resourceVersion")
            for pod in page.get("items") or []:
                ref = attempt_of(pod)
                if ref is not None:
                    seen[ref] = pod
            token = metadata.get("continue")
            if not token:
                break
        for ref in list(self._pods):
            if ref not in seen:
                # Gone while we were not watching: it ended without telling us how.
                self._observe(ref, PodStatus(AttemptStatus.PREEMPTED, None, "pod disappeared"), result, gone=True)
        for ref, pod in seen.items():
            self._observe(ref, classify(pod), result)
        self._resource_version = version
        result.relisted = True

    def _watch(self, core: k8s.CoreV1Api, config: Any, result: PollResult, seconds: int) -> None:
        """Events since the last resourceVersion, for ``seconds``. 410 Gone raises ApiException."""
        response = core.list_namespaced_pod(
            config.namespace,
            label_selector=SELECTOR,
            resource_version=self._resource_version,
            allow_watch_bookmarks=True,
            watch=True,
            timeout_seconds=seconds,
            _request_timeout=seconds + self._timeout(),
            _preload_content=False,
        )
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("type")
                pod = event.get("object") or {}
                if kind == "ERROR":
                    raise ApiException(status=pod.get("code", 500), reason=f"{pod.get('reason')}: {pod.get('message')}")
                version = (pod.get("metadata") or {}).get("resourceVersion")
                if version:
                    self._resource_version = version
                if kind == "BOOKMARK":
                    continue
                ref = attempt_of(pod)
                if ref is None:
                    continue
                if kind == "DELETED":
                    self._observe(ref, classify(pod, deleted=True), result, gone=True)
                else:
                    self._observe(ref, classify(pod), result)
        finally:
            response.close()
            response.release_conn()

    def _observe(self, ref: AttemptRef, status: PodStatus, result: PollResult, *, gone: bool = False) -> None:
        """Record a pod's status; report it when it changed (a terminal status only once)."""
        previous = self._reported.get(ref)
        if gone:
            self._pods.pop(ref, None)
            self._reported.pop(ref, None)
        else:
            self._pods[ref] = status
        if status.status is None or (previous is not None and previous.is_terminal):
            return
        if status.status is previous:
            return
        if not gone:
            self._reported[ref] = status.status
        if status.status.is_terminal:
            # Its pod (if any is left) and PDB go once the report is applied (collect).
            self._uncollected.add(ref)
        result.reports.append(
            AttemptReport(ref=ref, status=status.status, exit_code=status.exit_code, message=status.message)
        )

    def collect(self, refs: Iterable[AttemptRef]) -> int:
        """Delete the pods and PDBs of attempts whose end has been recorded. Returns pods deleted.

        Best effort: a failure is logged and the next poll's ``finished`` offers them again.
        Call it only after the reports of those attempts were applied.
        """
        config = self.config
        api = self.api_client()
        core = k8s.CoreV1Api(api)
        timeout = self._timeout()
        deleted = 0
        for ref in refs:
            name = pod_name(ref)
            try:
                core.delete_namespaced_pod(name, config.namespace, _request_timeout=timeout)
                deleted += 1
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("could not delete finished pod %s: %s", name, exc.reason)
                    continue
            except API_ERRORS as exc:
                log.warning("could not delete finished pod %s: %s", name, exc)
                continue
            try:
                self._delete_pdb(api, name, timeout)
            except BackendError as exc:
                log.warning("could not delete PodDisruptionBudget %s: %s", name, exc)
                continue
            with self._lock:
                self._uncollected.discard(ref)
        return deleted
