"""The cluster config file: budget defaults, user budget tiers, and the cloud backends.

The file is TOML (``.toml``) or YAML (``.yaml``/``.yml``); its path comes from
``IRIS_CLUSTER_CONFIG``. With no file, the defaults are Iris's: limit 1000, max band INTERACTIVE,
and no cloud backend. Parsing is strict: an invalid tier raises :class:`ClusterConfigError` naming
the tier and the field, and start-up stops there rather than run with a budget nobody meant.

The ``kubernetes`` section, the ``tpu`` section and the ``scale_groups`` list configure the
Kubernetes/Kueue backend and TPU slice provisioning (see ``docs/backends.md``). Their keys are
checked strictly too: an unknown key is an error naming it, so a typo never silently disables
a setting.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml
from django.conf import settings

from scheduler.core.bands import BAND_NAMES, Band
from scheduler.core.budget import MAX_BUDGET_POINTS
from scheduler.core.types import BudgetDefaults, GroupSpec, SchedulerConfig

TOP_LEVEL_KEYS = {"budget_defaults", "user_budgets", "kubernetes", "tpu", "scale_groups"}
BUDGET_DEFAULTS_KEYS = {"budget_limit", "max_band"}
TIER_KEYS = {"user_ids", "budget_limit", "max_band"}
# A user id is a Django username: at most 150 characters.
MAX_USER_ID_LENGTH = 150


class ClusterConfigError(ValueError):
    """The cluster config is invalid; the message names where."""


@dataclass(frozen=True)
class BudgetTier:
    user_ids: tuple[str, ...]
    budget_limit: int
    max_band: Band


@dataclass(frozen=True)
class PriorityClassSpec:
    """A Kubernetes PriorityClass (and the Kueue WorkloadPriorityClass of the same name)."""

    name: str
    value: int
    # "PreemptLowerPriority" or "Never" (a pod of this class never preempts anyone).
    preemption_policy: str


DEFAULT_PRIORITY_CLASSES: dict[Band, PriorityClassSpec] = {
    Band.SYSTEM: PriorityClassSpec("iris-system", 10000, "PreemptLowerPriority"),
    Band.PRODUCTION: PriorityClassSpec("iris-production", 1000, "PreemptLowerPriority"),
    Band.INTERACTIVE: PriorityClassSpec("iris-interactive", 10, "PreemptLowerPriority"),
    # BATCH never preempts: it only takes room nobody else wants.
    Band.BATCH: PriorityClassSpec("iris-batch", 0, "Never"),
}
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


@dataclass(frozen=True)
class KubernetesConfig:
    """Where and how tasks routed to Kubernetes run as pods that Kueue admits.

    Connection: ``api_server`` (an explicit URL, e.g. a proxy or a test server), else
    ``in_cluster`` (the pod's service account), else ``kubeconfig`` (and ``context``; empty
    means the client's default, ``~/.kube/config``).
    """

    enabled: bool = False
    api_server: str = ""
    in_cluster: bool = False
    kubeconfig: str = ""
    context: str = ""
    namespace: str = "iris"
    # The Kueue LocalQueue every pod is submitted to.
    queue_name: str = "iris"
    image: str = "python:3.12-slim"
    service_account: str = ""
    # The Worker row that stands for the whole cluster (tasks promoted to pods are "on" it).
    worker_name: str = "kubernetes"
    # Device types routed here when no registered worker serves them: "cpu" and/or "gpu".
    device_types: tuple[str, ...] = ("cpu", "gpu")
    gpu_resource: str = "nvidia.com/gpu"
    # Node label matched against a GPU job's variant (no selector when empty or variant "auto").
    gpu_variant_label: str = "nvidia.com/gpu.product"
    # Pods promoted per minute at most (a token bucket with this burst), to protect the API server.
    promotions_per_minute: int = 128
    # Seconds a single API request may take before it counts as failed (and is retried later).
    request_timeout_seconds: float = 10.0
    # Grace given to a pod on deletion (SIGTERM, then SIGKILL).
    termination_grace_seconds: int = 30
    priority_classes: dict[Band, PriorityClassSpec] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))


@dataclass(frozen=True)
class TpuConfig:
    """The GCP project TPU slices are provisioned in, and how."""

    enabled: bool = False
    project: str = ""
    # The default zone of scale groups that name none.
    zone: str = ""
    # A service-account JSON key; empty means Application Default Credentials.
    credentials_file: str = ""
    # Overrides the TPU API endpoint (a private endpoint, or a test server).
    api_endpoint: str = ""
    # "nodes" creates TPU VMs directly; "queued_resources" asks for them through the queue.
    provisioning: str = "nodes"
    # A slice with no work for this long is deleted (unless its group is at min_slices).
    idle_timeout_seconds: int = 600
    # A slice not ready this long after it was requested is given up (and deleted).
    ready_timeout_seconds: int = 1800
    # After a failed creation, a group waits this long, doubling per consecutive failure.
    backoff_seconds: int = 60
    max_backoff_seconds: int = 1800
    request_timeout_seconds: float = 30.0
    # Command the slice hosts run at boot to join as workers; formatted with {tpu_name},
    # {scale_group}, {variant}, {chips} and {worker_id_var} (see docs/backends.md).
    agent_command: str = ""


@dataclass(frozen=True)
class ScaleGroup:
    """A kind of TPU slice the provisioner may create, and how many."""

    name: str
    accelerator_type: str
    runtime_version: str
    zone: str
    spot: bool = False
    min_slices: int = 0
    max_slices: int = 1
    # The device variant jobs ask for to land here; defaults to the accelerator type.
    variant: str = ""
    hosts_per_slice: int = 1
    chips_per_host: int = 4

    @property
    def device_variant(self) -> str:
        return self.variant or self.accelerator_type


@dataclass(frozen=True)
class ClusterConfig:
    budget_defaults: BudgetDefaults = field(default_factory=BudgetDefaults)
    user_budgets: tuple[BudgetTier, ...] = ()
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    tpu: TpuConfig = field(default_factory=TpuConfig)
    scale_groups: tuple[ScaleGroup, ...] = ()
    source: str = "built-in defaults"


def _limit(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ClusterConfigError(f"{where}.budget_limit: expected a non-negative integer, got {value!r}")
    if value > MAX_BUDGET_POINTS:
        raise ClusterConfigError(f"{where}.budget_limit: at most {MAX_BUDGET_POINTS:,} points, got {value:,}")
    return value


def _unknown_keys(raw: dict, where: str, allowed: set[str]) -> None:
    """An unknown key is an error naming it and the nearest known one (a typo never goes unnoticed)."""
    unknown = sorted(set(raw) - allowed, key=str)
    if not unknown:
        return
    key = str(unknown[0])
    near = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    prefix = f"{where}.{key}" if where else key
    raise ClusterConfigError(f"{prefix}: unknown key; {hint}expected one of {', '.join(sorted(allowed))}")


def _user_id(user: object, where: str) -> str:
    if not isinstance(user, str) or not user.strip():
        raise ClusterConfigError(f"{where}: empty user id")
    user = user.strip()
    if "\x00" in user:
        raise ClusterConfigError(f"{where}: a user id must not contain a NUL character")
    if len(user) > MAX_USER_ID_LENGTH:
        raise ClusterConfigError(f"{where}: a user id has at most {MAX_USER_ID_LENGTH} characters, got {len(user)}")
    if not USER_ID.match(user):
        raise ClusterConfigError(f"{where}: {user[:40]!r} is not a user id (letters, digits and . _ - + @)")
    return user


def _band(value: object, where: str) -> Band:
    """A band by name, as the API takes it: a number (``max_band: 0`` is SYSTEM) is refused."""
    if not isinstance(value, str) or value.strip().isdigit():
        raise ClusterConfigError(f"{where}.max_band: expected a band name, one of {BAND_NAMES}, got {value!r}")
    try:
        return Band.parse(value)
    except ValueError as exc:
        raise ClusterConfigError(f"{where}.max_band: {exc}") from None


def parse_cluster_config(data: object, source: str = "<memory>") -> ClusterConfig:
    """Validate a parsed config document."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ClusterConfigError(f"{source}: expected a mapping at the top level")
    _unknown_keys(data, "", TOP_LEVEL_KEYS)
    raw_defaults = data.get("budget_defaults") or {}
    if not isinstance(raw_defaults, dict):
        raise ClusterConfigError("budget_defaults: expected a mapping")
    _unknown_keys(raw_defaults, "budget_defaults", BUDGET_DEFAULTS_KEYS)
    defaults = BudgetDefaults(
        budget_limit=_limit(raw_defaults.get("budget_limit", 1000), "budget_defaults"),
        max_band=_band(raw_defaults.get("max_band", "interactive"), "budget_defaults"),
    )
    tiers = []
    raw_tiers = data.get("user_budgets") or []
    if not isinstance(raw_tiers, list):
        raise ClusterConfigError("user_budgets: expected a list of tiers")
    for i, raw in enumerate(raw_tiers):
        where = f"user_budgets[{i}]"
        if not isinstance(raw, dict):
            raise ClusterConfigError(f"{where}: expected a mapping")
        _unknown_keys(raw, where, TIER_KEYS)
        user_ids = raw.get("user_ids")
        if not isinstance(user_ids, list) or not user_ids:
            raise ClusterConfigError(f"{where}.user_ids: expected a non-empty list of user ids")
        user_ids = [_user_id(user, f"{where}.user_ids[{j}]") for j, user in enumerate(user_ids)]
        if "budget_limit" not in raw:
            raise ClusterConfigError(f"{where}.budget_limit: missing")
        if "max_band" not in raw:
            raise ClusterConfigError(f"{where}.max_band: missing")
        tiers.append(
            BudgetTier(
                user_ids=tuple(user_ids),
                budget_limit=_limit(raw["budget_limit"], where),
                max_band=_band(raw["max_band"], where),
            )
        )
    kubernetes = _kubernetes(data.get("kubernetes"))
    tpu = _tpu(data.get("tpu"))
    scale_groups = _scale_groups(data.get("scale_groups"), tpu)
    return ClusterConfig(
        budget_defaults=defaults,
        user_budgets=tuple(tiers),
        kubernetes=kubernetes,
        tpu=tpu,
        scale_groups=scale_groups,
        source=source,
    )


# --- the cloud backends' sections -----------------------------------------------------------------


def _section(raw: object, where: str, allowed: set[str]) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ClusterConfigError(f"{where}: expected a mapping")
    _unknown_keys(raw, where, allowed)
    return raw


def _bool(raw: dict, key: str, where: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ClusterConfigError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _text(raw: dict, key: str, where: str, default: str = "", *, required: bool = False) -> str:
    if key not in raw:
        if required:
            raise ClusterConfigError(f"{where}.{key}: missing")
        return default
    value = raw[key]
    if not isinstance(value, str) or (required and not value.strip()):
        raise ClusterConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def _int(raw: dict, key: str, where: str, default: int, *, minimum: int = 0) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClusterConfigError(f"{where}.{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _seconds(raw: dict, key: str, where: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ClusterConfigError(f"{where}.{key}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _dns_name(value: str, where: str) -> str:
    if not DNS_NAME.match(value) or len(value) > 63:
        raise ClusterConfigError(f"{where}: {value!r} is not a valid name (lower-case letters, digits and '-')")
    return value


DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# What Django allows in usernames (as scheduler.foundation.inputs.SEGMENT).
USER_ID = re.compile(r"^[A-Za-z0-9_.@+-]+$")
KUBERNETES_KEYS = {
    "enabled",
    "api_server",
    "in_cluster",
    "kubeconfig",
    "context",
    "namespace",
    "queue_name",
    "image",
    "service_account",
    "worker_name",
    "device_types",
    "gpu_resource",
    "gpu_variant_label",
    "promotions_per_minute",
    "request_timeout_seconds",
    "termination_grace_seconds",
    "priority_classes",
}
TPU_KEYS = {
    "enabled",
    "project",
    "zone",
    "credentials_file",
    "api_endpoint",
    "provisioning",
    "idle_timeout_seconds",
    "ready_timeout_seconds",
    "backoff_seconds",
    "max_backoff_seconds",
    "request_timeout_seconds",
    "agent_command",
}
SCALE_GROUP_KEYS = {
    "name",
    "accelerator_type",
    "runtime_version",
    "zone",
    "spot",
    "min_slices",
    "max_slices",
    "variant",
    "hosts_per_slice",
    "chips_per_host",
}


def _kubernetes(raw: object) -> KubernetesConfig:
    where = "kubernetes"
    present = raw is not None
    raw = _section(raw, where, KUBERNETES_KEYS)
    defaults = KubernetesConfig()
    device_types = raw.get("device_types", list(defaults.device_types))
    if not isinstance(device_types, list) or not all(d in ("cpu", "gpu") for d in device_types):
        raise ClusterConfigError(f"{where}.device_types: expected a list of 'cpu' and/or 'gpu', got {device_types!r}")
    classes = dict(DEFAULT_PRIORITY_CLASSES)
    raw_classes = _section(raw.get("priority_classes"), f"{where}.priority_classes", {b.wire for b in Band})
    for band_name, item in raw_classes.items():
        band = Band.parse(band_name)
        item_where = f"{where}.priority_classes.{band_name}"
        item = _section(item, item_where, {"name", "value", "preemption_policy"})
        default = DEFAULT_PRIORITY_CLASSES[band]
        value = item.get("value", default.value)
        if isinstance(value, bool) or not isinstance(value, int) or not -(10**9) <= value <= 10**9:
            raise ClusterConfigError(f"{item_where}.value: expected an integer within +-1,000,000,000, got {value!r}")
        policy = item.get("preemption_policy", default.preemption_policy)
        if policy not in PREEMPTION_POLICIES:
            raise ClusterConfigError(
                f"{item_where}.preemption_policy: expected one of {', '.join(PREEMPTION_POLICIES)}"
            )
        classes[band] = PriorityClassSpec(
            name=_dns_name(_text(item, "name", item_where, default.name), f"{item_where}.name"),
            value=value,
            preemption_policy=policy,
        )
    names = [spec.name for spec in classes.values()]
    if len(set(names)) != len(names):
        raise ClusterConfigError(f"{where}.priority_classes: each band needs its own class name, got {names}")
    ranked = [classes[b].value for b in sorted(Band)]
    if ranked != sorted(ranked, reverse=True):
        raise ClusterConfigError(f"{where}.priority_classes: values must not rise from system to batch, got {ranked}")
    config = KubernetesConfig(
        enabled=_bool(raw, "enabled", where, present),
        api_server=_text(raw, "api_server", where),
        in_cluster=_bool(raw, "in_cluster", where, False),
        kubeconfig=_text(raw, "kubeconfig", where),
        context=_text(raw, "context", where),
        namespace=_dns_name(_text(raw, "namespace", where, defaults.namespace), f"{where}.namespace"),
        queue_name=_dns_name(_text(raw, "queue_name", where, defaults.queue_name), f"{where}.queue_name"),
        image=_text(raw, "image", where, defaults.image) or defaults.image,
        service_account=_text(raw, "service_account", where),
        worker_name=_text(raw, "worker_name", where, defaults.worker_name) or defaults.worker_name,
        device_types=tuple(device_types),
        gpu_resource=_text(raw, "gpu_resource", where, defaults.gpu_resource) or defaults.gpu_resource,
        gpu_variant_label=_text(raw, "gpu_variant_label", where, defaults.gpu_variant_label),
        promotions_per_minute=_int(raw, "promotions_per_minute", where, defaults.promotions_per_minute, minimum=1),
        request_timeout_seconds=_seconds(raw, "request_timeout_seconds", where, defaults.request_timeout_seconds),
        termination_grace_seconds=_int(raw, "termination_grace_seconds", where, defaults.termination_grace_seconds),
        priority_classes=classes,
    )
    if config.api_server and not config.api_server.startswith(("http://", "https://")):
        raise ClusterConfigError(f"{where}.api_server: expected an http:// or https:// URL, got {config.api_server!r}")
    return config


def _tpu(raw: object) -> TpuConfig:
    where = "tpu"
    present = raw is not None
    raw = _section(raw, where, TPU_KEYS)
    defaults = TpuConfig()
    enabled = _bool(raw, "enabled", where, present)
    provisioning = _text(raw, "provisioning", where, defaults.provisioning)
    if provisioning not in ("nodes", "queued_resources"):
        raise ClusterConfigError(f"{where}.provisioning: expected 'nodes' or 'queued_resources', got {provisioning!r}")
    config = TpuConfig(
        enabled=enabled,
        project=_text(raw, "project", where, required=enabled),
        zone=_text(raw, "zone", where),
        credentials_file=_text(raw, "credentials_file", where),
        api_endpoint=_text(raw, "api_endpoint", where),
        provisioning=provisioning,
        idle_timeout_seconds=_int(raw, "idle_timeout_seconds", where, defaults.idle_timeout_seconds),
        ready_timeout_seconds=_int(raw, "ready_timeout_seconds", where, defaults.ready_timeout_seconds, minimum=1),
        backoff_seconds=_int(raw, "backoff_seconds", where, defaults.backoff_seconds),
        max_backoff_seconds=_int(raw, "max_backoff_seconds", where, defaults.max_backoff_seconds),
        request_timeout_seconds=_seconds(raw, "request_timeout_seconds", where, defaults.request_timeout_seconds),
        agent_command=_text(raw, "agent_command", where),
    )
    return config


def _scale_groups(raw: object, tpu: TpuConfig) -> tuple[ScaleGroup, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ClusterConfigError("scale_groups: expected a list of scale groups")
    groups = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"scale_groups[{i}]"
        item = _section(item, where, SCALE_GROUP_KEYS)
        name = _dns_name(_text(item, "name", where, required=True), f"{where}.name")
        if name in seen:
            raise ClusterConfigError(f"{where}.name: duplicate scale group {name!r}")
        seen.add(name)
        zone = _text(item, "zone", where, tpu.zone)
        if not zone:
            raise ClusterConfigError(f"{where}.zone: missing (and tpu.zone gives no default)")
        group = ScaleGroup(
            name=name,
            accelerator_type=_text(item, "accelerator_type", where, required=True),
            runtime_version=_text(item, "runtime_version", where, required=True),
            zone=zone,
            spot=_bool(item, "spot", where, False),
            min_slices=_int(item, "min_slices", where, 0),
            max_slices=_int(item, "max_slices", where, 1),
            variant=_text(item, "variant", where),
            hosts_per_slice=_int(item, "hosts_per_slice", where, 1, minimum=1),
            chips_per_host=_int(item, "chips_per_host", where, 4, minimum=1),
        )
        if group.min_slices > group.max_slices:
            raise ClusterConfigError(f"{where}.min_slices: {group.min_slices} is above max_slices {group.max_slices}")
        groups.append(group)
    return tuple(groups)


def read_cluster_config(path: str | Path) -> ClusterConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterConfigError(f"cannot read cluster config {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(text)
        else:
            raise ClusterConfigError(f"{path}: cluster config must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ClusterConfigError(f"{path}: {exc}") from None
    except RecursionError:
        raise ClusterConfigError(f"{path}: nested too deeply to be a cluster config") from None
    except ValueError as exc:  # e.g. an integer literal too long for Python to convert
        raise ClusterConfigError(f"{path}: {exc}") from None
    return parse_cluster_config(data, source=str(path))


@lru_cache(maxsize=1)
def _cached(path: str) -> ClusterConfig:
    return read_cluster_config(path) if path else ClusterConfig()


def cluster_config() -> ClusterConfig:
    """The configured cluster config, read once per process."""
    return _cached(settings.CLUSTER_CONFIG)


def group_specs(config: ClusterConfig) -> tuple[GroupSpec, ...]:
    """The scale groups as the core reads them (the provisioner's plan, the tick's and the
    explain endpoint's "could a slice be created?"); none when TPU provisioning is off, since
    then no slice will be."""
    if not config.tpu.enabled:
        return ()
    return tuple(
        GroupSpec(g.name, g.device_variant, g.zone, g.min_slices, g.max_slices, g.hosts_per_slice, g.chips_per_host)
        for g in config.scale_groups
    )


def scheduler_config() -> SchedulerConfig:
    """The core's knobs as configured: the per-tick caps from settings, the budget defaults
    from the cluster config. The tick decides with it (``tick.load``); the uplift preview
    places with it."""
    return SchedulerConfig(
        max_tasks_per_job_per_cycle=settings.MAX_TASKS_PER_JOB_PER_TICK,
        max_assignments_per_worker=settings.MAX_ASSIGNMENTS_PER_WORKER,
        max_building_tasks=settings.MAX_BUILDING_TASKS,
        budget_defaults=cluster_config().budget_defaults,
    )
