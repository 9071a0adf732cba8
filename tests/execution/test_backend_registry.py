"""The backend registry: the built-in backends plus those IRIS_BACKENDS names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration.subprocesses import ROOT


def backend_names_with(env_value: str) -> list[str]:
    code = (
        "import django, json; django.setup(); from scheduler.backends import backend_names, backend_class; "
        "print(json.dumps([backend_names(), backend_class('mine').__name__ if 'mine' in backend_names() else None]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "iris_web.settings", "IRIS_BACKENDS": env_value},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_iris_backends_adds_a_named_backend_beside_the_built_in_ones():
    names, cls = backend_names_with("mine=scheduler.backends.local.LocalBackend")
    assert names == ["kubernetes", "local", "mine", "tpu"] and cls == "LocalBackend"


def test_without_iris_backends_only_the_built_in_ones_exist():
    names, cls = backend_names_with("")
    assert names == ["kubernetes", "local", "tpu"] and cls is None


def test_the_registry_says_which_backends_admit_and_routing_asks_it(db):
    """An admitting backend is one registry entry: the jobs table's route filter, the
    dispatcher's room check and the tick's routing all ask ``admitting_names`` / ``admissions``."""
    from scheduler.backends import Admission, admissions, admitting_names, register_admission
    from scheduler.core.types import DeviceType
    from scheduler.jobs import listing

    assert admitting_names() == {"kubernetes"}
    assert [a.route for a in admissions()] == ["kubernetes"]
    assert list(listing.routes()) == ["workers", "kubernetes", "unrouted"]

    def slurm(config):
        return Admission("slurm", True, frozenset({DeviceType.TPU}), "slurm-cluster", 60)

    register_admission("slurm", slurm)
    try:
        assert admitting_names() == {"kubernetes", "slurm"}
        assert [a.route for a in admissions()] == ["kubernetes", "slurm"]
        assert list(listing.routes()) == ["workers", "kubernetes", "slurm", "unrouted"]
        assert listing.parse_filter({"route": "slurm"}).route == "slurm"
    finally:
        register_admission("slurm", None)
    assert admitting_names() == {"kubernetes"}
