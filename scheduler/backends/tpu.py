"""TPU VMs: the backend their slice hosts run under, and the TPU API the provisioner drives.

On TPU VMs there is no Kueue: our own scheduler places tasks on slice hosts and reclaims
slices directly by preemption. Each host of a slice runs the worker agent (``manage.py
iris_worker --backend tpu``, started by the slice's boot script) and joins as a worker with
``tpu-name``, ``tpu-worker-id``, its variant and chip count. Delivering an order to such a host
is therefore exactly the local backend's mailbox: :class:`TpuBackend` is the local backend under
the name ``tpu`` (its workers heartbeat, and a silent one is declared lost).

:class:`TpuApi` wraps the official ``google-cloud-tpu`` client (``tpu_v2``, REST transport) for
``scheduler.provisioning``: create a slice as a node or as a queued resource, read whether it is
ready, delete it, and list the slices we manage (labelled ``iris-managed=true``). Calls never
block on long-running operations: the operation's name is kept and the slice is read again on
the next pass. Every call has a timeout and no client-side retry loop; any failure raises
:class:`TpuApiError` (a :class:`BackendError`) and the provisioner records it and backs off.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from scheduler.backends.base import BackendError
from scheduler.backends.local import LocalBackend

log = logging.getLogger(__name__)

MANAGED_LABEL = "iris-managed"
GROUP_LABEL = "iris-scale-group"
# Node states (tpu_v2.Node.State names) by what they mean for a slice.
READY_NODE_STATES = frozenset({"READY"})
GONE_NODE_STATES = frozenset({"PREEMPTED", "TERMINATED", "STOPPED", "STOPPING", "DELETING", "HIDDEN", "HIDING"})
# Queued resource states (tpu_v2.QueuedResourceState.State names).
READY_QUEUED_STATES = frozenset({"ACTIVE"})
FAILED_QUEUED_STATES = frozenset({"FAILED"})
GONE_QUEUED_STATES = frozenset({"SUSPENDING", "SUSPENDED", "DELETING"})
# What the boot script exports as the host's index in its slice.
WORKER_ID_VAR = (
    '"$(curl -s -H Metadata-Flavor:Google '
    'http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number)"'
)


class TpuBackend(LocalBackend):
    """Slice hosts run the worker agent: orders go through its mailbox, as for local workers."""

    name = "tpu"
    heartbeats = True


class TpuApiError(BackendError):
    """A TPU API call failed (HTTP error, timeout, refused connection, bad credentials)."""


@dataclass(frozen=True, slots=True)
class SliceStatus:
    """What the API says about a slice: ``creating``, ``ready``, ``failed`` or ``gone``."""

    state: str
    hosts: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class SliceRequest:
    """Everything needed to ask for one slice."""

    name: str
    zone: str
    accelerator_type: str
    runtime_version: str
    spot: bool
    scale_group: str
    variant: str
    chips_per_host: int


class TpuApi:
    """The TPU API for one project, through ``tpu_v2.TpuClient(transport="rest")``."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._client: Any = None
        self._lock = threading.Lock()

    # -- the client --------------------------------------------------------------------------------

    def client(self):
        with self._lock:
            if self._client is None:
                from google.api_core.client_options import ClientOptions
                from google.cloud import tpu_v2

                options = ClientOptions(api_endpoint=self.config.api_endpoint) if self.config.api_endpoint else None
                credentials = None
                try:
                    if self.config.credentials_file:
                        from google.oauth2 import service_account

                        credentials = service_account.Credentials.from_service_account_file(
                            self.config.credentials_file,
                            scopes=["https://www.googleapis.com/auth/cloud-platform"],
                        )
                    elif self.config.api_endpoint.startswith("http://"):
                        # A plain-HTTP endpoint is a local emulator: no Google credentials there.
                        from google.auth.credentials import AnonymousCredentials

                        credentials = AnonymousCredentials()
                    self._client = tpu_v2.TpuClient(credentials=credentials, transport="rest", client_options=options)
                except Exception as exc:  # noqa: BLE001 -- missing ADC, unreadable key file, ...
                    raise TpuApiError(f"cannot create the TPU client: {type(exc).__name__}: {exc}") from exc
            return self._client

    def _call(self, what: str, method, *args, **kwargs):
        from google.api_core import exceptions as gexc

        kwargs.setdefault("timeout", self.config.request_timeout_seconds)
        kwargs.setdefault("retry", None)
        try:
            return method(*args, **kwargs)
        except gexc.NotFound:
            raise
        except Exception as exc:  # noqa: BLE001 -- HTTP errors, timeouts, connection errors
            raise TpuApiError(f"{what}: {type(exc).__name__}: {exc}"[:2000]) from exc

    def parent(self, zone: str) -> str:
        return f"projects/{self.config.project}/locations/{zone}"

    def node_path(self, zone: str, name: str) -> str:
        return f"{self.parent(zone)}/nodes/{name}"

    def queued_path(self, zone: str, name: str) -> str:
        return f"{self.parent(zone)}/queuedResources/{name}"

    # -- requests ----------------------------------------------------------------------------------

    def boot_script(self, request: SliceRequest) -> str:
        if not self.config.agent_command:
            return ""
        return (
            "#!/bin/bash\n"
            + self.config.agent_command.format(
                tpu_name=request.name,
                scale_group=request.scale_group,
                variant=request.variant,
                chips=request.chips_per_host,
                worker_id_var=WORKER_ID_VAR,
            )
            + "\n"
        )

    def node_spec(self, request: SliceRequest, *, queued: bool) -> Any:
        from google.cloud import tpu_v2

        node = tpu_v2.Node(
            accelerator_type=request.accelerator_type,
            runtime_version=request.runtime_version,
            labels={MANAGED_LABEL: "true", GROUP_LABEL: request.scale_group},
            description=f"Iris scale group {request.scale_group}",
        )
        script = self.boot_script(request)
        if script:
            node.metadata = {"startup-script": script}
        if request.spot and not queued:
            node.scheduling_config = tpu_v2.SchedulingConfig(spot=True)
        return node

    def create(self, request: SliceRequest, provisioning: str) -> str:
        """Ask for the slice; returns the long-running operation's name (not waited for)."""
        from google.cloud import tpu_v2

        client = self.client()
        parent = self.parent(request.zone)
        from google.api_core import exceptions as gexc

        try:
            if provisioning == "queued_resources":
                queued = tpu_v2.QueuedResource(
                    tpu=tpu_v2.QueuedResource.Tpu(
                        node_spec=[
                            tpu_v2.QueuedResource.Tpu.NodeSpec(
                                parent=parent, node_id=request.name, node=self.node_spec(request, queued=True)
                            )
                        ]
                    )
                )
                if request.spot:
                    queued.spot = tpu_v2.QueuedResource.Spot()
                else:
                    queued.guaranteed = tpu_v2.QueuedResource.Guaranteed()
                operation = self._call(
                    f"creating queued resource {request.name}",
                    client.create_queued_resource,
                    request={"parent": parent, "queued_resource_id": request.name, "queued_resource": queued},
                )
            else:
                operation = self._call(
                    f"creating node {request.name}",
                    client.create_node,
                    request={"parent": parent, "node_id": request.name, "node": self.node_spec(request, queued=False)},
                )
        except gexc.NotFound as exc:
            raise TpuApiError(f"creating {request.name}: {exc}") from exc
        return operation.operation.name

    def status(self, name: str, zone: str, provisioning: str, operation: str = "") -> SliceStatus:
        """Read a slice. A missing one is ``failed`` if its creation failed, else ``creating``
        while its operation runs, else ``gone``."""
        from google.api_core import exceptions as gexc

        client = self.client()
        try:
            if provisioning == "queued_resources":
                queued = self._call(
                    f"reading queued resource {name}",
                    client.get_queued_resource,
                    request={"name": self.queued_path(zone, name)},
                )
                state = queued.state.state.name
                if state in READY_QUEUED_STATES:
                    return SliceStatus("ready", self._queued_hosts(client, zone, name))
                if state in FAILED_QUEUED_STATES:
                    error = queued.state.failed_data.error.message if queued.state.failed_data else ""
                    return SliceStatus("failed", 0, error or "queued resource failed")
                if state in GONE_QUEUED_STATES:
                    return SliceStatus("gone", 0, f"queued resource {state.lower()}")
                return SliceStatus("creating")
            node = self._call(f"reading node {name}", client.get_node, request={"name": self.node_path(zone, name)})
            state = node.state.name
            if state in READY_NODE_STATES:
                return SliceStatus("ready", len(node.network_endpoints))
            if state in GONE_NODE_STATES:
                return SliceStatus("gone", 0, f"node {state.lower()}")
            return SliceStatus("creating")
        except gexc.NotFound:
            pass
        if operation:
            op = self._call(f"reading operation {operation}", client.get_operation, request={"name": operation})
            if op.done and op.HasField("error"):
                return SliceStatus("failed", 0, op.error.message or f"creation failed (code {op.error.code})")
            if not op.done:
                return SliceStatus("creating")
        return SliceStatus("gone", 0, "not found")

    def _queued_hosts(self, client, zone: str, name: str) -> int:
        from google.api_core import exceptions as gexc

        try:
            node = self._call(f"reading node {name}", client.get_node, request={"name": self.node_path(zone, name)})
        except gexc.NotFound:
            return 0
        return len(node.network_endpoints)

    def delete(self, name: str, zone: str, provisioning: str) -> None:
        """Delete the slice (not waited for). A slice already gone is not an error."""
        from google.api_core import exceptions as gexc

        client = self.client()
        try:
            if provisioning == "queued_resources":
                self._call(
                    f"deleting queued resource {name}",
                    client.delete_queued_resource,
                    request={"name": self.queued_path(zone, name), "force": True},
                )
            else:
                self._call(f"deleting node {name}", client.delete_node, request={"name": self.node_path(zone, name)})
        except gexc.NotFound:
            return

    def managed(self, zone: str) -> list[str]:
        """Names of the nodes in ``zone`` that carry our label."""
        from google.api_core import exceptions as gexc

        client = self.client()
        try:
            pager = self._call(f"listing nodes in {zone}", client.list_nodes, request={"parent": self.parent(zone)})
            names = []
            for node in pager:
                if node.labels.get(MANAGED_LABEL) == "true":
                    names.append(node.name.rsplit("/", 1)[-1])
            return names
        except gexc.NotFound:
            return []
        except TpuApiError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a failure while paging
            raise TpuApiError(f"listing nodes in {zone}: {type(exc).__name__}: {exc}") from exc
