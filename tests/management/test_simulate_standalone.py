"""``manage.py simulate`` with plain arguments runs without setting up Django, and prints what
the Django command prints."""

import subprocess
import sys
from pathlib import Path

from django.core.management import call_command

from scheduler.management.standalone import parse_args

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "core" / "scenarios" / "gangs_and_bands.json"


def _manage(*args):
    return subprocess.run([sys.executable, "manage.py", "simulate", *args], cwd=ROOT, capture_output=True)


def test_plain_simulate_does_not_import_django():
    code = (
        "import sys, runpy; sys.argv = ['manage.py', 'simulate', '--indent', '0', %r];"
        "import atexit, os; from scheduler.management import standalone;"
        "code = standalone.main(sys.argv); sys.stdout.flush();"
        "os.write(2, b'django-loaded' if 'django' in sys.modules else b'no-django'); sys.exit(code)"
    ) % str(SCENARIO)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True)
    assert result.returncode == 0
    assert result.stderr.endswith(b"no-django")


def test_fast_path_prints_what_the_django_command_prints(capsys):
    call_command("simulate", str(SCENARIO))
    expected = capsys.readouterr().out.encode()
    result = _manage(str(SCENARIO))
    assert result.returncode == 0
    assert result.stdout == expected


def test_fast_path_error_is_the_command_error():
    result = _manage("/nonexistent/snap.json")
    assert result.returncode == 1
    assert result.stderr.endswith(b"CommandError: cannot read /nonexistent/snap.json: No such file or directory\n")


def test_other_argument_forms_go_to_django():
    assert parse_args(["--indent", "0", "f.json"]) == ("f.json", 0)
    assert parse_args(["--indent=2", "-"]) == ("-", 2)
    for args in (["-h"], [], ["--indent", "1", "f"], ["--settings", "x", "f"], ["a", "b"], ["--traceback", "f"]):
        assert parse_args(args) is None
    result = _manage("--indent", "1", str(SCENARIO))
    assert result.returncode == 2
    assert b"invalid choice: 1" in result.stderr


def test_kept_receives_the_runs_objects_and_the_output_is_unchanged():
    from scheduler.core.simulate import simulate
    from scheduler.core.types import ClusterSnapshot, Decision

    data = SCENARIO.read_bytes()
    kept: list = []
    assert simulate(data, "s.json", 2, kept) == simulate(data, "s.json", 2)
    snapshot, decision, document = kept
    assert isinstance(snapshot, ClusterSnapshot) and isinstance(decision, Decision)
    assert document["assignments"] == [
        {"task": a.task, "worker": a.worker, "band": a.band.wire} for a in decision.assignments
    ]
