"""``POST jobs/`` answers exactly as it did before the lean submission path (issue 26).

The answers below (status, headers that matter, JSON body) were captured from the DRF path
(main at ead3986) into ``golden/submission_bodies.json`` before the lean path replaced it, for a
set of valid and invalid submissions: every one must still be answered byte for byte the same
(once the values that change from run to run, times and row ids, are masked). Regenerate only
when a change of an answer is intended: ``IRIS_REGENERATE_GOLDEN=1 pytest tests/api/test_submission_bodies.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from scheduler.models import Job, Task
from tests.personas import GIB, make_worker, submit, token_client

JOBS = "/api/v1/jobs/"
GOLDEN = Path(__file__).parent / "golden" / "submission_bodies.json"

# Values that differ from run to run: masked in both the captured and the new answer.
VOLATILE = {"submitted_at_ms", "root_submitted_at_ms", "created_at", "scheduling_deadline_ms"}
_BIG_NUMBER = re.compile(r"\b1[6-9]\d{11}\b")  # an epoch-milliseconds time inside a message

# (name, persona, body as sent: a dict/list is JSON, bytes are sent as they are, content type)
CASES: list[tuple[str, str, object, str]] = [
    ("minimal", "alice", {"name": "train", "command": ["true"]}, "application/json"),
    (
        "every_field",
        "alice",
        {
            "name": "sweep-1",
            "command": ["python", "train.py", "--lr=0.1"],
            "cpu": 2.5,
            "memory": "3Gi",
            "replicas": 3,
            "priority": "batch",
            "group_by": "zone",
            "constraints": [
                {"key": "zone", "op": "in", "value": ["a", "b"]},
                {"key": "gpu", "op": "exists", "soft": True},
            ],
            "scheduling_timeout_seconds": 90,
            "max_retries_preemption": 2,
            "max_retries_failure": 1,
            "argv": ["iris", "job", "run", "--", "python", "train.py"],
        },
        "application/json",
    ),
    ("full_id", "alice", {"name": "/alice/full", "command": ["true"]}, "application/json"),
    ("child", "alice", {"name": "eval", "parent": "/alice/parent", "command": ["true"]}, "application/json"),
    ("child_by_path", "alice", {"name": "/alice/parent/eval2", "command": ["true"]}, "application/json"),
    ("too_big_warns", "alice", {"name": "huge", "command": ["true"], "cpu": 64}, "application/json"),
    (
        "tpu_warns",
        "alice",
        {"name": "tpu", "command": ["true"], "device": {"type": "tpu", "variant": "v5e", "count": 4}},
        "application/json",
    ),
    ("bad_device", "alice", {"name": "x", "command": ["true"], "device": "tpu:v5e:4"}, "application/json"),
    (
        "system_by_admin",
        "ada",
        {"name": "hero", "command": ["true"], "priority": "system", "system_reason": "hero run; commit=abc"},
        "application/json",
    ),
    # refusals
    ("no_command", "alice", {"name": "x"}, "application/json"),
    ("no_name", "alice", {"command": ["true"]}, "application/json"),
    ("bad_cpu", "alice", {"name": "x", "command": ["true"], "cpu": "lots"}, "application/json"),
    ("negative_replicas", "alice", {"name": "x", "command": ["true"], "replicas": -1}, "application/json"),
    ("bad_memory", "alice", {"name": "x", "command": ["true"], "memory": "3 parsecs"}, "application/json"),
    ("unknown_field", "alice", {"name": "x", "command": ["true"], "colour": "red"}, "application/json"),
    ("bad_priority", "alice", {"name": "x", "command": ["true"], "priority": "urgent"}, "application/json"),
    (
        "production_by_researcher",
        "alice",
        {"name": "x", "command": ["true"], "priority": "production"},
        "application/json",
    ),
    ("system_without_reason", "ada", {"name": "x", "command": ["true"], "priority": "system"}, "application/json"),
    ("other_users_root", "alice", {"name": "/bob/x", "command": ["true"]}, "application/json"),
    ("missing_parent", "alice", {"name": "x", "parent": "/alice/nope", "command": ["true"]}, "application/json"),
    ("other_users_parent", "bob", {"name": "x", "parent": "/alice/parent", "command": ["true"]}, "application/json"),
    ("taken_id", "alice", {"name": "parent", "command": ["true"]}, "application/json"),
    ("bad_segment", "alice", {"name": "a b", "command": ["true"]}, "application/json"),
    ("over_replica_limit", "alice", {"name": "x", "command": ["true"], "replicas": 100000}, "application/json"),
    (
        "bad_constraint_op",
        "alice",
        {"name": "x", "command": ["true"], "constraints": [{"key": "a", "op": "gt"}]},
        "application/json",
    ),
    ("command_not_list", "alice", {"name": "x", "command": "true"}, "application/json"),
    ("array_body", "alice", [{"name": "x", "command": ["true"]}], "application/json"),
    ("not_json", "alice", b"{not json", "application/json"),
    ("empty_body", "alice", b"", "application/json"),
    ("form_body", "alice", b"name=x", "application/x-www-form-urlencoded"),
    ("deep_json", "alice", b"[" * 5000 + b"]" * 5000, "application/json"),
    ("anonymous", "anonymous", {"name": "x", "command": ["true"]}, "application/json"),
    ("bad_token", "bad-token", {"name": "x", "command": ["true"]}, "application/json"),
]


def _shape(value):
    """A volatile value by its shape: its type, and a string's digits as 9s (a time's format stays)."""
    if isinstance(value, str):
        return re.sub(r"\d", "9", value)
    return f"<{type(value).__name__}>"


def _mask(value):
    if isinstance(value, dict):
        return {k: (_shape(v) if k in VOLATILE and v is not None else _mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, str):
        return _BIG_NUMBER.sub("<time>", value)
    return value


def _answer(response) -> dict:
    try:
        body = _mask(json.loads(response.content))
    except ValueError:
        body = response.content.decode(errors="replace")
    return {
        "status": response.status_code,
        "content_type": response.get("Content-Type"),
        "www_authenticate": response.get("WWW-Authenticate"),
        "body": body,
    }


def _send(client, body, content_type: str):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.generic("POST", JOBS, data, content_type=content_type)


@pytest.fixture
def answers(alice, bob, ada):
    make_worker("w1", cpu=32, memory_gib=256)
    submit(alice, "parent")
    clients = {"alice": token_client(alice), "bob": token_client(bob), "ada": token_client(ada)}
    clients["anonymous"] = token_client(None)
    clients["bad-token"] = token_client(None)
    clients["bad-token"].credentials(HTTP_AUTHORIZATION="Token " + "0" * 64)
    return {name: _answer(_send(clients[persona], body, ctype)) for name, persona, body, ctype in CASES}


@pytest.mark.django_db
def test_submission_answers_are_the_captured_ones(answers):
    if os.environ.get("IRIS_REGENERATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert set(answers) == set(golden)
    for name in golden:
        assert answers[name] == golden[name], name


@pytest.mark.django_db
def test_refused_submissions_write_nothing(answers):
    assert set(Job.objects.values_list("name", flat=True)) == {
        "/alice/parent",
        *(a["body"]["id"] for a in answers.values() if a["status"] == 201),
    }
    assert Task.objects.count() == 1 + sum(len(a["body"]["tasks"]) for a in answers.values() if a["status"] == 201)


def test_the_cases_cover_warnings_and_refusals():
    """The golden set is only as good as its spread: accepted jobs with and without warnings, and
    refusals of every status the operation declares that a body can cause."""
    golden = json.loads(GOLDEN.read_text())
    statuses = {a["status"] for a in golden.values()}
    assert {201, 400, 401, 403, 404, 409, 415}.issubset(statuses), statuses
    assert any(a["status"] == 201 and a["body"]["warnings"] for a in golden.values())
    assert any(a["status"] == 201 and not a["body"]["warnings"] for a in golden.values())
    assert GIB  # the worker fixture's unit, kept for readers of the cases


@pytest.mark.django_db
def test_the_written_out_answer_equals_the_schema_serializers_key_for_key(alice, ada):
    """``submitted_job_json`` renders what ``JobSubmittedSerializer`` (the schema's) renders,
    keys in the same order, for jobs of every shape the cases above accept."""
    from rest_framework.renderers import JSONRenderer

    from scheduler.api.serializers import JobSubmittedSerializer, submitted_job_json
    from scheduler.jobs.submit import submit_job

    make_worker("w1", cpu=32, memory_gib=256)
    submit(alice, "parent")
    jobs = []
    for name, persona, body, _ in CASES:
        if not isinstance(body, dict) or name in ("child", "child_by_path") and not jobs:
            continue
        try:
            jobs.append(submit_job({"alice": alice, "ada": ada}.get(persona, alice), body))
        except Exception:  # noqa: BLE001 -- the refusals are the golden test's business
            continue
    assert len(jobs) >= 7
    for job in jobs:
        ours, theirs = submitted_job_json(job), JobSubmittedSerializer(job).data
        assert list(ours.items()) == list(theirs.items()), job.name
        assert JSONRenderer().render(ours) == JSONRenderer().render(theirs)
