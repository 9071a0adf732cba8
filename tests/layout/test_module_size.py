"""No module of the server or the CLI outside migrations is over 700 lines: past that a module
holds more than one concept (split by area or by part, as api/, core/preemption/, core/wire/
and core/explain/ are)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 700


def test_no_module_is_over_700_lines():
    modules = [*(ROOT / "scheduler").rglob("*.py"), *(ROOT / "cli" / "iris_cli").rglob("*.py")]
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if "migrations" not in path.parts and (lines := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert modules and long == {}
