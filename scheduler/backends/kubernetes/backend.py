"""The Kubernetes backend: orders in as pods, reports out from pod status (see the package)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
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
from scheduler.foundation.cluster_config import cluster_config
from scheduler.core.bands import Band

log = logging.getLogger(__name__)

from scheduler.backends.kubernetes.manifests import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    LIST_PAGE,
    MANAGED_BY,
    MANAGER,
    PERMANENT_STATUSES,
    SELECTOR,
    WATCH_SECONDS,
    WORKLOAD_PRIORITY_CLASSES,
    needs_pdb,
    pdb_manifest,
    pod_manifest,
    pod_name,
    priority_class_manifest,
    workload_priority_class_manifest,
)
from scheduler.backends.kubernetes.status import PodStatus, attempt_of, classify

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

    def _ensure_priority_class(
        self, api: k8s.SchedulingV1Api, band: Band, spec: Any, timeout: float, result: SetupResult
    ) -> None:
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
            elif (
                existing.value != spec.value
                or (existing.preemption_policy or "PreemptLowerPriority") != spec.preemption_policy
            ):
                # value and preemptionPolicy are immutable: replace the class.
                api.delete_priority_class(spec.name, _request_timeout=timeout)
                self._create(lambda: api.create_priority_class(body, _request_timeout=timeout))
                result.updated.append(what)
            elif (
                existing.description != body["description"]
                or (existing.metadata.labels or {}).get(MANAGED_BY) != MANAGER
            ):
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

    def _ensure_workload_priority_class(
        self, api: k8s.CustomObjectsApi, band: Band, spec: Any, timeout: float, result: SetupResult
    ) -> None:
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
            kwargs: dict[str, Any] = {
                "label_selector": SELECTOR,
                "limit": LIST_PAGE,
                "_request_timeout": self._timeout(),
            }
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
