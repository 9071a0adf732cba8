"""Backends: where tasks run. The registry maps ``Worker.backend`` names to backend instances.

The contract is in :mod:`scheduler.backends.base`. Backends are found by name so that a job is
routed by where its workers live: a START or STOP for an attempt on worker W goes to the
backend named by ``W.backend``. Built-in backends are imported lazily by dotted path, so a
backend's client library (``kubernetes``, ``google-cloud-tpu``) is only imported where used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from scheduler.core.types import DeviceType
from scheduler.foundation.cluster_config import ClusterConfig, cluster_config

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

__all__ = [
    "AttemptRef",
    "AttemptReport",
    "AttemptStatus",
    "Backend",
    "BackendError",
    "Delivery",
    "PermanentBackendError",
    "StartOrder",
    "StopOrder",
    "Admission",
    "UnknownBackend",
    "admissions",
    "admitting_names",
    "backend_class",
    "backend_names",
    "get_backend",
    "heartbeat_backend_names",
    "polled_backend_names",
    "register_admission",
    "register_backend",
    "unregister_backend",
]

# name -> "module.path.ClassName". A deployment adds its own with IRIS_BACKENDS
# ("name=module.path.ClassName,..."; settings.EXTRA_BACKENDS), tests with register_backend.
BUILTIN_BACKENDS: dict[str, str] = {
    "local": "scheduler.backends.local.LocalBackend",
    "kubernetes": "scheduler.backends.kubernetes.KubernetesBackend",
    "tpu": "scheduler.backends.tpu.TpuBackend",
}


def configured_backends() -> dict[str, str]:
    """The built-in backends and those the settings add (a configured name replaces a built-in)."""
    from django.conf import settings

    return {**BUILTIN_BACKENDS, **getattr(settings, "EXTRA_BACKENDS", {})}


_paths: dict[str, str] = configured_backends()
_instances: dict[str, Backend] = {}


class UnknownBackend(BackendError):
    """No backend is registered under a worker's backend name. Retried: a deploy may add it."""


def register_backend(name: str, backend: Backend | str) -> None:
    """Register (or replace) a backend under ``name``: an instance, or a dotted class path."""
    _instances.pop(name, None)
    if isinstance(backend, str):
        _paths[name] = backend
    else:
        _paths[name] = f"{type(backend).__module__}.{type(backend).__qualname__}"
        _instances[name] = backend


def unregister_backend(name: str) -> None:
    """Forget a registered backend (tests); built-in names fall back to their built-in class."""
    _instances.pop(name, None)
    configured = configured_backends()
    if name in configured:
        _paths[name] = configured[name]
    else:
        _paths.pop(name, None)


def backend_names() -> list[str]:
    return sorted(_paths)


def backend_class(name: str) -> type[Backend]:
    """The class registered under ``name``, imported but not instantiated. Raises :class:`UnknownBackend`."""
    instance = _instances.get(name)
    if instance is not None:
        return type(instance)
    path = _paths.get(name)
    if path is None:
        raise UnknownBackend(f"no backend named {name!r}; known: {', '.join(backend_names())}")
    module_name, _, class_name = path.rpartition(".")
    try:
        return getattr(import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownBackend(f"backend {name!r} ({path}) cannot be loaded: {exc}") from exc


def get_backend(name: str) -> Backend:
    """The backend instance for a ``Worker.backend`` name. Raises :class:`UnknownBackend`."""
    instance = _instances.get(name)
    if instance is None:
        instance = _instances[name] = backend_class(name)()
    return instance


def _names_where(predicate) -> list[str]:
    names = []
    for name in backend_names():
        try:
            if predicate(backend_class(name)):
                names.append(name)
        except UnknownBackend:
            continue
    return names


def heartbeat_backend_names() -> list[str]:
    """Names of backends whose workers heartbeat (and so can be declared lost when silent)."""
    return _names_where(lambda cls: cls.heartbeats)


def polled_backend_names() -> list[str]:
    """Names of backends that implement :meth:`Backend.sync` (the shell polls them for reports)."""
    return _names_where(lambda cls: cls.sync is not Backend.sync)


# --- admitting backends ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """A backend that admits work itself (another scheduler, as Kueue does, decides when a pod
    runs), as the tick routes to it: jobs go there whole, by name, and its one worker row stands
    for a cluster, not capacity (the core never places on it).

    ``route`` is the backend's name: ``Job.route``, ``Worker.backend`` and ``BackendState.name``.
    ``device_types`` the devices routed there when no worker of ours serves the job (empty when
    it is disabled); ``worker_name`` the row promoted tasks are "on"; ``promotions_per_minute``
    the tick's promotion rate cap."""

    route: str
    enabled: bool
    device_types: frozenset[DeviceType]
    worker_name: str
    promotions_per_minute: int


def kubernetes_admission(config: ClusterConfig) -> Admission:
    """The Kubernetes backend's admission, from the cluster config's ``kubernetes`` section (read
    here, not from the backend's class, so routing never imports the Kubernetes client)."""
    kube = config.kubernetes
    return Admission(
        route="kubernetes",
        enabled=kube.enabled,
        device_types=frozenset(DeviceType(d) for d in kube.device_types) if kube.enabled else frozenset(),
        worker_name=kube.worker_name,
        promotions_per_minute=kube.promotions_per_minute,
    )


# name -> its admission from the cluster config: the backends that admit (every other backend
# is placed on by our scheduler, worker by worker).
_admitting: dict[str, Callable[[ClusterConfig], Admission]] = {"kubernetes": kubernetes_admission}


def register_admission(name: str, admission: Callable[[ClusterConfig], Admission] | None) -> None:
    """Declare the backend ``name`` admitting (``admission`` reads its settings from the cluster
    config), or not (None)."""
    if admission is None:
        _admitting.pop(name, None)
    else:
        _admitting[name] = admission


def admitting_names() -> frozenset[str]:
    """The names of the admitting backends (a route to one of them is not our scheduler's)."""
    return frozenset(_admitting)


def admissions(config: ClusterConfig | None = None) -> tuple[Admission, ...]:
    """Every admitting backend's admission, by name."""
    config = config if config is not None else cluster_config()
    return tuple(_admitting[name](config) for name in sorted(_admitting))
