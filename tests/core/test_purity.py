"""The core stays pure: no framework imports and no clock (house style; import-linter also checks
the imports)."""

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "scheduler" / "core"
MODULES = sorted(CORE.glob("*.py"))
FORBIDDEN_IMPORTS = {"django", "celery", "rest_framework", "kombu", "redis", "psycopg"}
# Calls that read the clock; the core gets ``now_ms`` from the snapshot instead.
CLOCK_CALLS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "process_time", "now", "utcnow", "today"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_modules_import_no_framework(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_modules_do_not_read_the_clock(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in CLOCK_CALLS, f"{path.name}:{node.lineno} calls .{node.func.attr}()"
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            raise AssertionError(f"{path.name} imports from time")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_modules_open_with_a_docstring(path):
    assert ast.get_docstring(ast.parse(path.read_text())), path.name
