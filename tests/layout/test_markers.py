"""Every test module that starts the server's processes itself (``tests.integration.subprocesses.start``:
worker agents, Celery, ``manage.py``) carries the ``e2e`` marker, so ``-m "not e2e"`` leaves out
exactly those; the marker is registered (``--strict-markers``), and CI's required markers are
all registered too."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def registered_markers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {line.split(":")[0].strip() for line in config["tool"]["pytest"]["ini_options"]["markers"]}


def test_modules_that_start_processes_are_marked_e2e():
    starters = [
        path
        for path in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"from tests\.integration\.subprocesses import [^\n]*\bstart\b", path.read_text())
        or "test_end_to_end import" in path.read_text()
    ]
    assert starters
    unmarked = [str(p.relative_to(ROOT)) for p in starters if "pytest.mark.e2e" not in p.read_text()]
    assert unmarked == []


def test_the_markers_ci_requires_are_registered():
    required = set()
    for value in re.findall(r'IRIS_REQUIRE_MARKERS="([^"]*)"', (ROOT / ".ci" / "run").read_text()):
        required |= {m for m in value.split(",") if m}
    assert required and required <= registered_markers()
    assert "e2e" in registered_markers()
