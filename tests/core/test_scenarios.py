"""Golden replay: named snapshots in ``scenarios/`` and the decisions they must produce.

Each ``scenarios/<name>.json`` is a snapshot in the documented JSON format (with a
``description`` of what it shows); ``scenarios/<name>.expected.json`` is the decision, checked in.
A change in behaviour shows up as a diff of that file. To accept an intended change, run the
tests with ``IRIS_UPDATE_GOLDEN=1`` and review the diff before committing it.
"""

import json
import os
from pathlib import Path

import pytest

from scheduler.core.decision import decide
from scheduler.core.wire import decision_to_json, snapshot_from_json

SCENARIOS = Path(__file__).parent / "scenarios"
NAMES = sorted(p.name.removesuffix(".json") for p in SCENARIOS.glob("*.json") if not p.name.endswith(".expected.json"))


@pytest.mark.parametrize("name", NAMES)
def test_scenario_replays_to_its_expected_decision(name):
    snapshot = snapshot_from_json(json.loads((SCENARIOS / f"{name}.json").read_text()))
    actual = decision_to_json(decide(snapshot))
    expected_path = SCENARIOS / f"{name}.expected.json"
    if os.environ.get("IRIS_UPDATE_GOLDEN"):
        expected_path.write_text(json.dumps(actual, indent=2) + "\n")
    assert actual == json.loads(expected_path.read_text())


def test_there_are_scenarios():
    assert len(NAMES) >= 4
