"""Hostile input: every body below gets a clear 4xx with the JSON error, never a 500, and
writes nothing (issue 13, section 5)."""

from __future__ import annotations

import json

import pytest

from scheduler.models import Job, UserBudget, Worker
from tests.api.conftest import error_of

JOBS = "/api/v1/jobs/"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def job(**fields) -> dict:
    return {"name": "train", "command": ["python", "train.py"], **fields}


def refused(response, status: int = 400, field: str | None = None) -> dict:
    assert response.status_code == status, response.content[:500]
    body = error_of(response)
    assert set(body) == {"code", "message", "details"}
    if field is not None:
        assert body["details"].get("field") == field, body
    return body


def test_a_memory_string_of_400_digits_is_invalid_not_a_server_error(as_alice):
    refused(as_alice.post(JOBS, job(memory="9" * 400), format="json"), field="memory")
    refused(as_alice.post(JOBS, job(memory="9" * 400 + "Gi"), format="json"), field="memory")
    assert not Job.objects.exists()


def test_memory_above_the_bound_names_it_in_a_unit_not_as_two_to_the_sixty(as_alice):
    body = refused(as_alice.post(JOBS, job(memory="2000Pi"), format="json"), field="memory")
    assert "1,024Pi" in body["message"]
    assert str(2**60) not in body["message"]


@pytest.mark.parametrize("path", ["jobs/", "what-if/", "workers/", "agent/report/", "uplifts/"])
def test_json_nested_5000_deep_is_a_400_on_every_endpoint(path, as_ada, as_agent):
    client = as_agent if path.startswith("agent/") else as_ada
    body = json.dumps({"name": "x", "command": ["x"]})[:-1] + ', "device": ' + nested(5000) + "}"
    refused(client.post(f"/api/v1/{path}", body, content_type="application/json"))
    refused(client.post(f"/api/v1/{path}", nested(5000), content_type="application/json"))


def test_json_just_nested_beyond_the_limit_is_refused_and_a_normal_body_is_not(as_alice):
    body = refused(as_alice.post(JOBS, json.dumps(job(device=json.loads(nested(40)))), content_type="application/json"))
    assert "nested deeper than 32" in body["message"]
    assert (
        as_alice.post(
            JOBS, job(constraints=[{"key": "zone", "op": "in", "value": ["a", "b"]}]), format="json"
        ).status_code
        == 201
    )


def test_a_body_over_the_upload_limit_is_413_with_the_json_error(as_alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    response = as_alice.post(JOBS, json.dumps(job(command=["x" * 200_000])), content_type="application/json")
    body = refused(response, 413)
    assert "100,000 bytes" in body["message"]
    assert not Job.objects.exists()


def test_a_positive_cpu_below_one_millicore_is_refused_not_rounded_to_zero(as_alice):
    body = refused(as_alice.post(JOBS, job(cpu=1e-9), format="json"), field="cpu")
    assert "0.001" in body["message"]
    assert as_alice.post(JOBS, job(name="tiny", cpu=0.001), format="json").json()["resources"]["cpu_millicores"] == 1


def test_a_2mb_command_item_is_refused(as_alice):
    refused(as_alice.post(JOBS, job(command=["echo", "x" * (2 * 1024 * 1024)]), format="json"), field="command[1]")


def test_a_command_of_many_long_items_is_refused_as_a_whole(as_alice):
    body = refused(as_alice.post(JOBS, job(command=["echo"] + ["x" * 100_000] * 3), format="json"), field="command")
    assert "262,144 characters" in body["message"]


def test_an_in_constraint_with_100000_values_is_refused(as_alice):
    values = [f"h{i}" for i in range(100_000)]
    body = refused(
        as_alice.post(JOBS, job(constraints=[{"key": "host", "op": "in", "value": values}]), format="json"),
        field="constraints[0].value",
    )
    assert "256" in body["message"]


def test_a_worker_with_an_unknown_backend_is_refused_naming_the_known_ones(as_olivia):
    response = as_olivia.post(
        "/api/v1/workers/", {"name": "w9", "cpu": 4, "memory": "8Gi", "backend": "nope"}, format="json"
    )
    body = refused(response, field="backend")
    assert "local" in body["message"]
    assert not Worker.objects.filter(name="w9").exists()


@pytest.mark.parametrize("value", [0, 3, "0"])
def test_a_band_given_as_a_rank_is_refused(as_ada, alice, value):
    response = as_ada.put("/api/v1/budgets/alice", {"max_band": value, "reason": "r"}, format="json")
    refused(response, field="max_band")
    assert not UserBudget.objects.exists()
    refused(as_ada.post(JOBS, job(priority=value), format="json"), field="priority")


@pytest.mark.parametrize("method,path", [("post", JOBS), ("get", JOBS), ("get", "/api/v1/queue/")])
@pytest.mark.parametrize("header", ["Token \xe9", "Token \xff\xfe" + "a" * 40, "Token " + "\xe9" * 64])
def test_a_token_that_is_not_utf8_is_a_401_not_a_server_error(db, client, method, path, header):
    """The header's bytes (WSGI gives them as Latin-1) that are no UTF-8: refused as any bad
    token is, on the lean submission route and through DRF alike."""
    response = getattr(client, method)(
        path, data=json.dumps(job()) if method == "post" else None, content_type="application/json",
        HTTP_AUTHORIZATION=header,
    )  # fmt: skip
    body = refused(response, 401)
    assert body["code"] == "UNAUTHENTICATED", body
    assert response["WWW-Authenticate"] == "Token"
    assert not Job.objects.exists()
