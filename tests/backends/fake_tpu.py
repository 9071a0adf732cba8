"""A minimal TPU API (``tpu.googleapis.com/v2``) over HTTP, for the real ``google-cloud-tpu``
client with ``transport="rest"``.

Nodes and queued resources are created by long-running operations. Nothing becomes ready by
itself: tests say when (:meth:`FakeTpu.make_ready`, :meth:`FakeTpu.fail_creation`,
:meth:`FakeTpu.preempt`), so every step of a slice's life is explicit. Every request is recorded
(method, path, query, JSON body) and failures or delays can be injected per method and path.
"""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.backends.fake_http import FakeServer, JsonHandler, RecordsRequests

ZONE_PATH = re.compile(r"^/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/:]+)")


@dataclass
class FakeTpu(RecordsRequests):
    """State of the fake API; the HTTP handler reads and writes it under ``lock``."""

    nodes: dict[str, dict] = field(default_factory=dict)  # full name -> Node JSON
    queued: dict[str, dict] = field(default_factory=dict)  # full name -> QueuedResource JSON
    operations: dict[str, dict] = field(default_factory=dict)  # full name -> Operation JSON
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    hosts_per_slice: int = 1

    # -- test controls -------------------------------------------------------------------------

    def node(self, short: str) -> dict | None:
        for name, node in self.nodes.items():
            if name.endswith(f"/nodes/{short}"):
                return node
        return None

    def make_ready(self, short: str, hosts: int | None = None) -> None:
        """The slice finished provisioning: node READY with its hosts, operation done."""
        with self.lock:
            hosts = hosts or self.hosts_per_slice
            for name, node in self.nodes.items():
                if name.endswith(f"/nodes/{short}"):
                    node["state"] = "READY"
                    node["networkEndpoints"] = [{"ipAddress": f"10.0.0.{i + 1}", "port": 8470} for i in range(hosts)]
            for name, queued in self.queued.items():
                if name.endswith(f"/queuedResources/{short}"):
                    queued["state"] = {"state": "ACTIVE"}
                    spec = queued["tpu"]["nodeSpec"][0]
                    node = dict(spec["node"])
                    node_name = f"{spec['parent']}/nodes/{spec['nodeId']}"
                    node.update(
                        name=node_name,
                        state="READY",
                        networkEndpoints=[{"ipAddress": f"10.0.0.{i + 1}"} for i in range(hosts)],
                    )
                    self.nodes[node_name] = node
            for op in self.operations.values():
                if op["metadata"].get("target", "").endswith(f"/{short}"):
                    op["done"] = True
                    op["response"] = {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node"}

    def fail_creation(self, short: str, message: str = "no capacity in zone") -> None:
        """The creation failed: the node never appears and its operation ends with an error."""
        with self.lock:
            for name in [n for n in self.nodes if n.endswith(f"/nodes/{short}")]:
                del self.nodes[name]
            for name, queued in self.queued.items():
                if name.endswith(f"/queuedResources/{short}"):
                    queued["state"] = {"state": "FAILED", "failedData": {"error": {"code": 8, "message": message}}}
            for op in self.operations.values():
                if op["metadata"].get("target", "").endswith(f"/{short}"):
                    op["done"] = True
                    op["error"] = {"code": 8, "message": message}

    def preempt(self, short: str) -> None:
        with self.lock:
            for name, node in self.nodes.items():
                if name.endswith(f"/nodes/{short}"):
                    node["state"] = "PREEMPTED"

    # -- the API -------------------------------------------------------------------------------

    def _operation(self, parent: str, target: str, verb: str) -> dict:
        name = f"{parent}/operations/operation-{next(self.counter)}"
        op = {
            "name": name,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                "target": target,
                "verb": verb,
            },
            "done": False,
        }
        self.operations[name] = op
        return op

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        zone = ZONE_PATH.match(path)
        if not zone:
            return 404, error(404, f"unknown path {path}")
        parent = zone.group(0)[len("/v2/") :]
        rest = path[zone.end() :]
        if rest == "/nodes" and method == "POST":
            node_id = query.get("nodeId", [""])[0]
            name = f"{parent}/nodes/{node_id}"
            if name in self.nodes:
                return 409, error(409, f"node {node_id} already exists", "ALREADY_EXISTS")
            node = dict(body or {})
            node.update(name=name, state="CREATING")
            self.nodes[name] = node
            return 200, self._operation(parent, name, "create")
        if rest == "/nodes" and method == "GET":
            return 200, {"nodes": [n for n in self.nodes.values() if n["name"].startswith(parent + "/")]}
        if rest.startswith("/nodes/"):
            name = f"{parent}{rest}"
            if method == "GET":
                return (200, self.nodes[name]) if name in self.nodes else (404, error(404, f"node {name} not found"))
            if method == "DELETE":
                if name not in self.nodes:
                    return 404, error(404, f"node {name} not found")
                del self.nodes[name]
                op = self._operation(parent, name, "delete")
                op["done"] = True
                return 200, op
        if rest == "/queuedResources" and method == "POST":
            queued_id = query.get("queuedResourceId", [""])[0]
            name = f"{parent}/queuedResources/{queued_id}"
            if name in self.queued:
                return 409, error(409, f"queued resource {queued_id} already exists", "ALREADY_EXISTS")
            queued = dict(body or {})
            queued.update(name=name, state={"state": "ACCEPTED"})
            self.queued[name] = queued
            return 200, self._operation(parent, name, "create")
        if rest.startswith("/queuedResources/"):
            name = f"{parent}{rest}"
            if method == "GET":
                if name not in self.queued:
                    return 404, error(404, f"queued resource {name} not found")
                return 200, self.queued[name]
            if method == "DELETE":
                if name not in self.queued:
                    return 404, error(404, f"queued resource {name} not found")
                queued = self.queued.pop(name)
                for spec in queued.get("tpu", {}).get("nodeSpec", []):
                    self.nodes.pop(f"{spec['parent']}/nodes/{spec['nodeId']}", None)
                op = self._operation(parent, name, "delete")
                op["done"] = True
                return 200, op
        if rest.startswith("/operations/") and method == "GET":
            name = f"{parent}{rest}"
            return (200, self.operations[name]) if name in self.operations else (404, error(404, "no operation"))
        return 404, error(404, f"unknown path {path}")


def error(code: int, message: str, status: str = "NOT_FOUND") -> dict:
    statuses = {404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL", 503: "UNAVAILABLE", 403: "PERMISSION_DENIED"}
    return {"error": {"code": code, "message": message, "status": statuses.get(code, status)}}


class Handler(JsonHandler):
    def serve(self, method: str) -> None:
        fake: FakeTpu = self.server.fake  # type: ignore[attr-defined]
        request, fault = self.receive(method)
        if fault and fault.status:
            status, payload = fault.status, error(fault.status, "injected failure")
        else:
            with fake.lock:
                status, payload = fake.handle(method, request.path, request.query, request.body)
        self.send_json(status, payload)


class FakeTpuServer(FakeServer):
    """Runs a :class:`FakeTpu` on 127.0.0.1 with an ephemeral port, in a thread."""

    def __init__(self) -> None:
        super().__init__(FakeTpu(), Handler)
