"""The CLI's argument parsing: pure, no server."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iris_cli import main
from iris_cli.client import Session
from iris_cli.arguments import constraint, default_job_name, device, duration, job_path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("7d", 604800), ("1w", 604800)],
)
def test_duration_accepts_units(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "0", "0h", "2h-", "1.5h", "-5m"])
def test_duration_rejects_nonsense(text):
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("zone=us-a", {"key": "zone", "op": "eq", "value": "us-a", "soft": False}),
        ("zone!=us-a", {"key": "zone", "op": "ne", "value": "us-a", "soft": False}),
        ("zone=us-a,us-b", {"key": "zone", "op": "in", "value": ["us-a", "us-b"], "soft": False}),
        ("preemptible", {"key": "preemptible", "op": "exists", "soft": False}),
    ],
)
def test_constraint_syntax(text, spec):
    assert constraint(soft=False)(text) == spec


def test_prefer_makes_soft_constraints():
    assert constraint(soft=True)("zone=a")["soft"] is True


@pytest.mark.parametrize("text", ["=a", "zone=", "zone!=", " =x"])
def test_constraint_rejects_missing_parts(text):
    with pytest.raises(argparse.ArgumentTypeError):
        constraint(soft=False)(text)


def test_gpu_needs_variant_and_count():
    assert device("gpu", count_required=True)("h100:8") == {"type": "gpu", "variant": "h100", "count": 8}
    for bad in ["h100", ":8", "h100:", "h100:0", "h100:x"]:
        with pytest.raises(argparse.ArgumentTypeError):
            device("gpu", count_required=True)(bad)


def test_tpu_count_is_optional():
    assert device("tpu", count_required=False)("v5litepod-16") == {"type": "tpu", "variant": "v5litepod-16"}
    assert device("tpu", count_required=False)("v5p-8:4")["count"] == 4


def test_job_ids_keep_slashes_and_lose_the_leading_one():
    assert job_path("/alice/train/eval") == "jobs/alice/train/eval"
    assert job_path("alice/train") == "jobs/alice/train"


def test_urls_encode_spaces_but_keep_slashes_and_colon_verbs():
    session = Session(server="http://iris.example")
    assert session.url("jobs/alice/my job:explain") == "http://iris.example/api/v1/jobs/alice/my%20job:explain"
    assert session.url("jobs/", {"user": "alice", "band": None}) == "http://iris.example/api/v1/jobs/?user=alice"


def test_default_job_name_is_the_program_and_the_time():
    name = default_job_name(["/usr/bin/python3", "train.py"])
    assert name.startswith("python3-2")
    assert default_job_name(["./run me!"]).startswith("run-me-")


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "run", "--gpu", "h100", "--", "x"],  # no count
        ["job", "run", "--gpu", "h100:8", "--tpu", "v5p-8", "--", "x"],  # both accelerators
        ["job", "run", "--priority", "urgent", "--", "x"],
        ["job", "run", "--replicas", "0", "--", "x"],
        ["job", "run", "--name", "x"],  # no command
        ["job", "list", "--", "x"],  # a command where none belongs
        ["uplift", "request", "--reason", "r", "--duration", "2h"],  # raises nothing
        ["uplift", "request", "--max-band", "interactive", "--reason", "r", "--duration", "soon"],
        ["admin", "budget", "set", "bob", "--reason", "r"],  # sets nothing
        ["job"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2_without_contacting_a_server(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("IRIS_SERVER", "http://127.0.0.1:9")  # discard port: would fail as exit 1
    monkeypatch.setenv("IRIS_TOKEN", "unused")

    assert main(argv) == 2
    assert capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "job" in capsys.readouterr().out


def test_the_cli_imports_nothing_of_the_server():
    code = (
        "import sys, iris_cli; print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'django', 'rest_framework', 'celery', 'scheduler', 'iris_web'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_cli_names_the_bands_as_the_api_does():
    from iris_cli.arguments import BANDS
    from scheduler.core.bands import BANDS_IN_ORDER

    assert BANDS == [band.wire for band in BANDS_IN_ORDER]


@given(st.integers(min_value=-10, max_value=1 << 62))
def test_the_cli_shows_sizes_and_cores_as_the_console_does(n):
    from iris_cli import units as cli_units
    from scheduler.core import units

    assert cli_units.format_memory(n) == units.format_memory(n)
    assert cli_units.format_cores(n) == units.format_cores(n)


@given(
    st.sampled_from([1, 10**3, 10**6, 10**9, 10**12, 1 << 10, 1 << 20, 1 << 30, 1 << 40]),
    st.integers(min_value=0, max_value=20_000),
)
def test_the_cli_shows_round_sizes_as_the_console_does(unit, count):
    from iris_cli import units as cli_units
    from scheduler.core import units

    assert cli_units.format_memory(unit * count) == units.format_memory(unit * count)
    assert cli_units.format_memory(unit * count // 2) == units.format_memory(unit * count // 2)
