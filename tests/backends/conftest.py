"""Fixtures for the cloud backends: fake API servers the real clients talk to, and a cluster
config pointing at them.

``kube`` is a Kubernetes API (pods, PDBs, PriorityClasses, Kueue objects; list and watch) and
``gcp`` a TPU API (nodes, queued resources, operations), each on 127.0.0.1 with an ephemeral
port. ``cluster_config`` writes a TOML config that enables both backends against them and
points ``IRIS_CLUSTER_CONFIG`` at it; tests change it with ``cluster_config(**overrides)``.
"""

from __future__ import annotations

import json

import pytest

from scheduler import backends
from scheduler.foundation.cluster_config import _cached
from scheduler.provisioning.tpu import _api_cache
from tests.backends.kubernetes.fake_kubernetes import FakeKubernetesServer
from tests.backends.fake_tpu import FakeTpuServer


@pytest.fixture
def kube():
    with FakeKubernetesServer() as server:
        yield server.fake, server.url


@pytest.fixture
def gcp():
    with FakeTpuServer() as server:
        yield server.fake, server.url


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def write_config(path, *, kubernetes: dict | None, tpu: dict | None, scale_groups: list[dict]) -> None:
    lines = ["[budget_defaults]", "budget_limit = 0", 'max_band = "interactive"', ""]
    for name, section in (("kubernetes", kubernetes), ("tpu", tpu)):
        if section is None:
            continue
        lines.append(f"[{name}]")
        nested = {}
        for key, value in section.items():
            if isinstance(value, dict):
                nested[key] = value
            else:
                lines.append(f"{key} = {toml_value(value)}")
        for key, table in nested.items():
            for sub, values in table.items():
                lines.append(f"[{name}.{key}.{sub}]")
                lines.extend(f"{k} = {toml_value(v)}" for k, v in values.items())
        lines.append("")
    for group in scale_groups:
        lines.append("[[scale_groups]]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in group.items())
        lines.append("")
    path.write_text("\n".join(lines))


@pytest.fixture
def cluster_config(tmp_path, settings, request):
    """A function that (re)writes the cluster config; called once with defaults here."""
    kube_url = request.getfixturevalue("kube")[1] if "kube" in request.fixturenames else "http://127.0.0.1:9"
    gcp_url = request.getfixturevalue("gcp")[1] if "gcp" in request.fixturenames else "http://127.0.0.1:9"
    path = tmp_path / "cluster.toml"

    def configure(*, kubernetes: dict | None | bool = True, tpu: dict | None | bool = True, scale_groups=None):
        kube_section = None
        if kubernetes is not False and kubernetes is not None:
            kube_section = {"api_server": kube_url, "request_timeout_seconds": 2}
            if isinstance(kubernetes, dict):
                kube_section.update(kubernetes)
        tpu_section = None
        if tpu is not False and tpu is not None:
            tpu_section = {
                "project": "lab",
                "zone": "us-central2-b",
                "api_endpoint": gcp_url,
                "request_timeout_seconds": 2,
                "idle_timeout_seconds": 600,
                "backoff_seconds": 60,
                "max_backoff_seconds": 600,
            }
            if isinstance(tpu, dict):
                tpu_section.update(tpu)
        groups = (
            scale_groups
            if scale_groups is not None
            else [
                {
                    "name": "v5p",
                    "accelerator_type": "v5p-8",
                    "runtime_version": "v2-alpha-tpuv5",
                    "max_slices": 2,
                    "hosts_per_slice": 2,
                    "chips_per_host": 4,
                },
            ]
        )
        write_config(path, kubernetes=kube_section, tpu=tpu_section, scale_groups=groups)
        settings.CLUSTER_CONFIG = str(path)
        _cached.cache_clear()
        # A fresh backend instance reads the new config (and forgets what it saw).
        for name in ("kubernetes", "tpu"):
            backends.unregister_backend(name)

        _api_cache.clear()

    configure()
    yield configure
    _cached.cache_clear()
    for name in ("kubernetes", "tpu"):
        backends.unregister_backend(name)
