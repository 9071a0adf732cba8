"""The role matrix: every endpoint, asked by every persona.

anonymous gets 401 everywhere (except minting a token); alice owns the job and the grant in
the fixture world, bob is the other researcher, olivia the operator, ada the admin.
"""

from __future__ import annotations

import pytest

from scheduler.budgets.writes import request_uplift
from tests.api.conftest import PERSONAS, error_of
from tests.personas import agent_client, make_worker, submit

OK = 200
CREATED = 201


def everyone(status: int) -> dict[str, int]:
    return {"anonymous": 401, "alice": status, "bob": status, "olivia": status, "ada": status}


def only(status: int, *allowed: str) -> dict[str, int]:
    return {p: (401 if p == "anonymous" else status if p in allowed else 403) for p in PERSONAS}


CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
}

# (method, path, body, expected status per persona)
MATRIX = [
    ("get", "me/", None, everyone(OK)),
    ("get", "me/notifications/", None, everyone(OK)),
    ("put", "me/notifications/", {"email_events": ["finished", "failed"]}, everyone(OK)),
    # Uplift requests are an admin's topic: a researcher or operator choosing it is told so.
    ("put", "me/notifications/", {"email_events": ["uplift_requested"]}, {**everyone(400), "ada": OK}),
    ("get", "tokens/", None, everyone(OK)),
    ("get", "tokens/?user=alice", None, only(OK, "alice", "ada")),
    ("get", "tokens/?user=*", None, only(OK, "ada")),
    ("get", "jobs/", None, everyone(OK)),
    ("post", "jobs/", {"name": "eval", "command": ["true"]}, everyone(CREATED)),
    ("post", "jobs/", {"name": "eval", "parent": "alice/train", "command": ["true"]}, only(CREATED, "alice", "ada")),
    ("post", "jobs:batch", {"jobs": [{"name": "sweep-0", "command": ["true"]}]}, everyone(CREATED)),
    (
        "post",
        "jobs:batch",
        {"jobs": [{"name": "sweep-0", "parent": "alice/train", "command": ["true"]}]},
        only(CREATED, "alice", "ada"),
    ),
    ("get", "jobs/alice/train", None, everyone(OK)),
    ("get", "jobs/alice/train:explain", None, everyone(OK)),
    ("post", "jobs/alice/train:cancel", None, only(OK, "alice", "ada")),
    ("get", "queue/", None, everyone(OK)),
    ("get", "budgets/", None, everyone(OK)),
    ("get", "budgets/alice", None, everyone(OK)),
    ("put", "budgets/alice", {"budget_limit": 5000, "reason": "new project"}, only(OK, "ada")),
    (
        "post",
        "uplifts/",
        {"budget_limit": 2000, "reason": "paper deadline", "duration_seconds": 3600},
        everyone(CREATED),
    ),
    (
        "post",
        "uplifts/",
        {"user": "alice", "budget_limit": 2000, "reason": "paper deadline", "duration_seconds": 3600},
        only(CREATED, "alice", "ada"),
    ),
    ("get", "uplifts/", None, everyone(OK)),
    ("get", "uplifts/?user=alice", None, only(OK, "alice", "olivia", "ada")),
    ("post", "uplifts/{grant}:approve", {"note": "ok"}, only(OK, "ada")),
    ("post", "uplifts/{grant}:deny", {"note": "no"}, only(OK, "ada")),
    # No tick has run in this world: admins get the stable "preview after the first tick".
    ("post", "uplifts/{grant}:preview", {}, only(409, "ada")),
    ("get", "audit/", None, only(OK, "ada")),
    ("get", "workers/", None, everyone(OK)),
    ("post", "workers/", {"name": "w2", "cpu": 8, "memory": "32Gi"}, only(CREATED, "olivia", "ada")),
    ("post", "workers/w1:heartbeat", {"healthy": True}, only(OK, "olivia", "ada")),
    ("post", "workers/w1:drain", None, only(OK, "olivia", "ada")),
    ("post", "workers/w1:credential", None, only(CREATED, "olivia", "ada")),
    ("post", "workers/w1:undrain", None, only(OK, "olivia", "ada")),
    ("get", "preemptions/", None, everyone(OK)),
    ("get", "ticks/", None, everyone(OK)),
    ("get", "fairness/", None, everyone(OK)),
    ("get", "events/", None, everyone(OK)),
    ("get", "events/?job=alice/train&since=0", None, everyone(OK)),
    ("post", "ticks/", None, only(OK, "olivia", "ada")),
    ("post", "what-if/", {"name": "probe"}, everyone(OK)),
    ("post", "what-if/", {"name": "probe", "user": "alice"}, only(OK, "alice", "olivia", "ada")),
]


@pytest.fixture
def world(users):
    """alice's job /alice/train (2 tasks), worker w1, and alice's requested grant."""
    submit(users["alice"], "train", replicas=2)
    make_worker("w1")
    grant = request_uplift(users["alice"], budget_limit=5000, reason="deadline", duration_seconds=3600)
    return {"grant": grant.pk}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    MATRIX,
    ids=[f"{m.upper()} {p}" + (f" {sorted(b)}" if b else "") for m, p, b, _ in MATRIX],
)
def test_role_matrix(world, clients, persona, method, path, body, expected):
    url = "/api/v1/" + path.format(**world)
    client = clients[persona]
    response = getattr(client, method)(url, body, format="json") if body is not None else getattr(client, method)(url)
    assert response.status_code == expected[persona], response.content
    if response.status_code >= 400:
        assert error_of(response)["code"] == CODES[response.status_code]


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    MATRIX,
    ids=[f"{m.upper()} {p}" + (f" {sorted(b)}" if b else "") for m, p, b, _ in MATRIX],
)
def test_a_worker_agents_credential_opens_no_endpoint_of_the_api(world, method, path, body, expected):
    """A worker credential is not a user: no submissions, no uplifts, nothing but the agent API."""
    client = agent_client("w1")
    url = "/api/v1/" + path.format(**world)
    response = getattr(client, method)(url, body, format="json") if body is not None else getattr(client, method)(url)
    assert response.status_code == 401, response.content
    assert error_of(response)["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize("persona", PERSONAS)
def test_anyone_may_mint_a_token_with_the_right_password(users, clients, persona):
    username = "alice" if persona == "anonymous" else persona
    response = clients[persona].post(
        "/api/v1/tokens/", {"username": username, "password": "correct horse battery staple"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["username"] == username
