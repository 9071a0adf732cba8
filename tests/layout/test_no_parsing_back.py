"""Views, serializers and CLI formatting render typed results; they never parse back a band or
a sentence that the board or a use case produced (``jobs/explain.py`` once split its own
rendered downgrade sentence, the job view called ``Band.parse`` on explain's wire strings and
split a task id to find a user).

An AST scan of the interface modules that render what the board and the use cases return:
``scheduler/views/``, ``scheduler/api/serializers/``, ``cli/iris_cli/formatting.py`` and ``cells.py``, and
``scheduler/jobs/explain.py`` (the use case the views render, where the sentence was split).

- ``Band.parse`` (and ``Band[name]``) may only read what a person typed: each allowed call is
  listed below with the input it reads. A band from the board or a use case is a ``Band`` (or a
  row's rank) and is rendered with ``.name`` / ``.wire``, never parsed.
- No string is cut up (``split``, ``rsplit``, ``partition``, ``rpartition``, ``splitlines``,
  or the ``re`` module's matchers): a use case returns records, not sentences to take apart.
  Each allowed call is listed with what it cuts, none of it board or use-case output.

Out of scope, and why: ``scheduler/templatetags/console.py`` (its ``band_badge`` accepts the
rank ints of model rows and the priority factors' machine ``value``, a band name by the API's
contract) and the CLI's commands (they parse the user's flags).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = sorted(
    [
        *(ROOT / "scheduler" / "views").glob("*.py"),
        *(ROOT / "scheduler" / "api" / "serializers").glob("*.py"),
        ROOT / "cli" / "iris_cli" / "formatting.py",
        ROOT / "cli" / "iris_cli" / "cells.py",
        ROOT / "scheduler" / "jobs" / "explain.py",
    ]
)

# (module, source of the argument) -> the user input it parses.
BAND_PARSE_ALLOWED = {
    ("scheduler/views/history.py", "filters['band']"): "the ?band= query parameter, through the filter form",
    ("scheduler/views/queue.py", "filters['band']"): "the ?band= query parameter, through the filter form",
}
# (module, source of the call) -> what it cuts (never board or use-case output).
SPLIT_ALLOWED = {
    ("scheduler/views/charts.py", "stretch[0].split(',')"): "an SVG point 'x,y' the chart built itself",
    ("scheduler/views/charts.py", "points[0].split(',')"): "an SVG point 'x,y' the chart built itself",
    (
        "scheduler/views/common.py",
        "name.replace('.', '_').split('[')",
    ): "an error's field path (device.count, constraints[2]) mapped to a form field's name",
    ("scheduler/views/forms.py", "shlex.split(text)"): "the command a person typed into the form",
    ("cli/iris_cli/cells.py", "key.split('.')"): "pick()'s own dotted key constants",
    ("cli/iris_cli/cells.py", "value.partition('T')"): "an ISO 8601 timestamp (a machine format)",
}
SPLITTERS = {"split", "rsplit", "partition", "rpartition", "splitlines"}
REGEX = {"match", "search", "fullmatch", "findall", "finditer", "split", "sub"}


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def band_parses(tree: ast.AST) -> list[str]:
    """The argument source of every ``Band.parse(x)`` call and every ``Band[x]`` lookup."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "parse"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "Band"
        ):
            found.append(ast.unparse(node.args[0]) if node.args else "")
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Band":
            found.append(f"Band[{ast.unparse(node.slice)}]")
    return found


def string_cuts(tree: ast.AST) -> list[str]:
    """The source of every call that cuts a string: ``x.split(...)`` and friends, ``re.*``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        if isinstance(receiver, ast.Name) and receiver.id == "re" and node.func.attr in REGEX:
            found.append(ast.unparse(node))
        elif node.func.attr in SPLITTERS:
            found.append(ast.unparse(node))
    return found


def scan(collect) -> set[tuple[str, str]]:
    return {(relative(path), hit) for path in SCANNED for hit in collect(ast.parse(path.read_text()))}


def test_no_interface_module_parses_a_band_it_did_not_read_from_a_person():
    assert scan(band_parses) <= set(BAND_PARSE_ALLOWED), "render a Band's .name/.wire; parse only user input"


def test_no_interface_module_or_explain_cuts_up_a_string_it_was_handed():
    cuts = {(module, call) for module, call in scan(string_cuts)}
    allowed = {(module, prefix) for module, prefix in SPLIT_ALLOWED}
    unexplained = {(m, c) for m, c in cuts if not any(m == am and c.startswith(ap) for am, ap in allowed)}
    assert not unexplained, "return records from the use case and render them; do not parse sentences back"


def test_every_allowance_is_still_needed():
    """An allowance whose call went away is removed, so the lists stay a true account."""
    bands, cuts = scan(band_parses), scan(string_cuts)
    assert set(BAND_PARSE_ALLOWED) <= bands
    for module, prefix in SPLIT_ALLOWED:
        assert any(m == module and c.startswith(prefix) for m, c in cuts), (module, prefix)


def test_the_scan_sees_the_shapes_it_forbids():
    """The scan itself: it finds a parse of a served band and a split of a served sentence."""
    tree = ast.parse(
        'requested = Band.parse(explain["requested_band"])\n'
        'text = item["why"].split(": ", 1)[-1]\n'
        'user = event["preemptor"].split("/")[1]\n'
        "band = Band[name.upper()]\n"
        'm = re.search(r"position (\\d+)", reason["text"])\n'
    )
    assert band_parses(tree) == ["explain['requested_band']", "Band[name.upper()]"]
    assert len(string_cuts(tree)) == 3
