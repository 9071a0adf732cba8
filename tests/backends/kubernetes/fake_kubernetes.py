"""A minimal Kubernetes API server over HTTP, for the real ``kubernetes`` client.

It serves what the backend uses: pods (create, read, list with label selectors and pages,
watch from a resourceVersion, delete), PodDisruptionBudgets, PriorityClasses (whose ``value``
and ``preemptionPolicy`` are immutable, as in Kubernetes) and Kueue custom objects
(WorkloadPriorityClasses, Workloads). Objects get ``resourceVersion``, ``uid`` and
``creationTimestamp``; a pod starts ``Pending``. Every write is an event; a watch replays the
events after its resourceVersion and then streams new ones until ``timeoutSeconds``. Events
can be compacted away (:meth:`FakeKubernetes.compact`) so that a watch gets ``410 Gone``.

Tests change pods as a kubelet or Kueue would (:meth:`FakeKubernetes.set_pod_status`,
:meth:`FakeKubernetes.evict`), inject failures and delays per method and path
(:meth:`FakeKubernetes.fail`), and read every request received (``requests``).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.backends.fake_http import FakeServer, JsonHandler, RecordsRequests, Request

CORE = re.compile(r"^/api/v1/(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?$")
GROUPED = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?$"
)
IMMUTABLE = {"priorityclasses": ("value", "preemptionPolicy")}
KINDS = {
    "pods": ("v1", "Pod"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "priorityclasses": ("scheduling.k8s.io/v1", "PriorityClass"),
    "workloadpriorityclasses": ("kueue.x-k8s.io/v1beta1", "WorkloadPriorityClass"),
    "workloads": ("kueue.x-k8s.io/v1beta1", "Workload"),
}


@dataclass
class Event:
    version: int
    kind: str
    collection: tuple
    obj: dict


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def container_status(state: dict) -> dict:
    """A container status with every field the API always sends."""
    return {
        "name": "task",
        "image": "python:3.12-slim",
        "imageID": "sha256:0",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


def merge(target: dict, patch: dict) -> dict:
    """JSON merge patch (RFC 7386)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def matches(obj: dict, selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


@dataclass
class FakeKubernetes(RecordsRequests):
    store: dict[tuple, dict[str, dict]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    version: int = 0
    compacted_before: int = 0

    # -- test controls -------------------------------------------------------------------------

    def writes(self) -> list[Request]:
        return [r for r in self.calls() if r.method in ("POST", "PUT", "PATCH", "DELETE")]

    def pods(self, namespace: str = "iris") -> dict[str, dict]:
        with self.cond:
            return copy.deepcopy(self.store.get(("pods", namespace), {}))

    def objects(self, plural: str, namespace: str | None = None) -> dict[str, dict]:
        with self.cond:
            return copy.deepcopy(self.store.get((plural, namespace), {}))

    def set_pod_status(self, name: str, status: dict, namespace: str = "iris") -> None:
        """Replace a pod's status, as the kubelet (or Kueue) would; a MODIFIED event."""
        with self.cond:
            pod = self.store[("pods", namespace)][name]
            pod["status"] = copy.deepcopy(status)
            self._touch(("pods", namespace), pod, "MODIFIED")

    def run(self, name: str, namespace: str = "iris") -> None:
        self.set_pod_status(
            name,
            {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [container_status({"running": {}})],
            },
            namespace,
        )

    def exit(self, name: str, code: int, namespace: str = "iris") -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        self.set_pod_status(
            name, {"phase": phase, "containerStatuses": [container_status({"terminated": terminated})]}, namespace
        )

    def evict(self, name: str, namespace: str = "iris") -> None:
        """Kueue evicts the pod's workload (preempted by a higher-priority one): condition, then delete."""
        self.set_pod_status(
            name,
            {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "TerminationTarget",
                        "status": "True",
                        "reason": "WorkloadEvictedDueToPreempted",
                        "message": "Preempted to accommodate a workload (UID: 1) due to prioritization",
                    }
                ],
            },
            namespace,
        )

    def delete_pod(self, name: str, namespace: str = "iris", final_status: dict | None = None) -> None:
        with self.cond:
            pod = self.store[("pods", namespace)].pop(name)
            if final_status is not None:
                pod["status"] = final_status
            self._touch(("pods", namespace), pod, "DELETED", store=False)

    def compact(self) -> None:
        """Forget past events: a watch from an older resourceVersion gets 410 Gone."""
        with self.cond:
            self.compacted_before = self.version + 1
            self.events.clear()

    # -- storage -------------------------------------------------------------------------------

    def _touch(self, collection: tuple, obj: dict, kind: str, *, store: bool = True) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        if store:
            self.store.setdefault(collection, {})[obj["metadata"]["name"]] = obj
        self.events.append(Event(self.version, kind, collection, copy.deepcopy(obj)))
        self.cond.notify_all()

    def handle(self, method: str, collection: tuple, name: str | None, query: dict, body: Any) -> tuple[int, Any]:
        plural, namespace = collection
        items = self.store.setdefault(collection, {})
        api_version, kind = KINDS.get(plural, ("v1", plural))
        if name is None and method == "GET":
            selector = query.get("labelSelector", [""])[0]
            listed = [copy.deepcopy(o) for n, o in sorted(items.items()) if matches(o, selector)]
            limit = int(query.get("limit", ["0"])[0] or 0)
            start = int(query.get("continue", ["0"])[0] or 0)
            page = listed[start : start + limit] if limit else listed[start:]
            meta: dict[str, Any] = {"resourceVersion": str(self.version)}
            if limit and start + limit < len(listed):
                meta["continue"] = str(start + limit)
            return 200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": page}
        if name is None and method == "POST":
            obj = copy.deepcopy(body)
            obj_name = obj["metadata"]["name"]
            if obj_name in items:
                return 409, status_body(409, "AlreadyExists", f'{plural} "{obj_name}" already exists')
            obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp="2026-11-29T10:00:00Z")
            if namespace:
                obj["metadata"]["namespace"] = namespace
            if plural == "pods":
                obj["status"] = {"phase": "Pending"}
            self._touch(collection, obj, "ADDED")
            return 201, copy.deepcopy(obj)
        if name is None:
            return 405, status_body(405, "MethodNotAllowed", method)
        existing = items.get(name)
        if existing is None:
            return 404, status_body(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(existing)
        if method in ("PUT", "PATCH"):
            updated = copy.deepcopy(body) if method == "PUT" else merge(copy.deepcopy(existing), body)
            for key in IMMUTABLE.get(plural, ()):
                if updated.get(key) != existing.get(key):
                    return 422, status_body(422, "Invalid", f"{plural} {name}: field {key} is immutable")
            updated.setdefault("metadata", {})
            updated["metadata"].update(
                uid=existing["metadata"]["uid"], name=name, creationTimestamp=existing["metadata"]["creationTimestamp"]
            )
            if plural == "pods" and "status" not in updated:
                updated["status"] = existing.get("status", {})
            self._touch(collection, updated, "MODIFIED")
            return 200, copy.deepcopy(updated)
        if method == "DELETE":
            del items[name]
            self._touch(collection, existing, "DELETED", store=False)
            if plural == "pods":
                return 200, copy.deepcopy(existing)
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return 405, status_body(405, "MethodNotAllowed", method)


class Handler(JsonHandler):
    def serve(self, method: str) -> None:
        fake: FakeKubernetes = self.server.fake  # type: ignore[attr-defined]
        request, fault = self.receive(method)
        query, body = request.query, request.body
        if fault and fault.status:
            return self.send_json(fault.status, status_body(fault.status, "InternalError", "injected failure"))
        match = CORE.match(request.path) or GROUPED.match(request.path)
        if not match:
            return self.send_json(404, status_body(404, "NotFound", f"no route for {request.path}"))
        collection = (match.group("plural"), match.group("ns"))
        if method == "GET" and query.get("watch", ["false"])[0] in ("true", "1"):
            return self._watch(fake, collection, query)
        with fake.cond:
            status, payload = fake.handle(method, collection, match.group("name"), query, body)
        self.send_json(status, payload)

    def _watch(self, fake: FakeKubernetes, collection: tuple, query: dict) -> None:
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["5"])[0])
        selector = query.get("labelSelector", [""])[0]
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            with fake.cond:
                if since and since < fake.compacted_before:
                    gone = {
                        "type": "ERROR",
                        "object": status_body(410, "Expired", f"too old resource version: {since}"),
                    }
                    self.wfile.write(json.dumps(gone).encode() + b"\n")
                    return
            sent = since
            while True:
                with fake.cond:
                    batch = [e for e in fake.events if e.version > sent and e.collection == collection]
                    if not batch:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        fake.cond.wait(left)
                        continue
                for event in batch:
                    sent = event.version
                    if matches(event.obj, selector):
                        line = json.dumps({"type": event.kind, "object": event.obj}).encode() + b"\n"
                        self.wfile.write(line)
                        self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            self.close_connection = True


class FakeKubernetesServer(FakeServer):
    """Runs a :class:`FakeKubernetes` on 127.0.0.1 with an ephemeral port, in a thread."""

    def __init__(self) -> None:
        super().__init__(FakeKubernetes(), Handler)
