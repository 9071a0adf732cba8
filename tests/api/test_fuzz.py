"""Schema-driven fuzzing: every operation of the OpenAPI schema, signed in as an admin.

Schemathesis generates requests from /api/schema/ and sends them through the real WSGI stack
and database. Whatever it sends, the API must answer without a server error, and every error
must be the JSON shape. A bounded number of examples per operation keeps this to seconds.

The schema is loaded eagerly (``schemathesis.openapi.from_wsgi``): the lazy loader
(``schemathesis.pytest.from_fixture``) sets ``Node._nodeid``, which pytest 9.2 no longer has.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error

from scheduler.budgets.writes import request_uplift
from scheduler.models import ApiToken
from tests.personas import make_worker, submit

EXAMPLES_PER_OPERATION = 15
# Statuses of the generated job submissions, read by the test after the parametrized one.
STATUSES: list[int] = []

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Like Django's test client: requests must not close the test's connection (and transaction)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _no_long_polls(settings):
    """``GET events/?wait=`` would wait up to 25 s an example for events nobody writes."""
    settings.EVENTS_MAX_WAIT_SECONDS = 1
    settings.EVENTS_POLL_SECONDS = 0.05


@pytest.fixture
def admin_headers(ada, alice):
    """Something to find: a job, a worker and a grant, so not every request is a 404."""
    submit(alice, "train", replicas=2)
    make_worker("w1")
    request_uplift(alice, budget_limit=5000, reason="deadline", duration_seconds=3600)
    _, key = ApiToken.objects.create(user=ada, name="fuzz")
    return {"Authorization": f"Token {key}"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_request_gets_a_server_error_or_a_non_json_error(case, admin_headers):
    response = case.call(headers=admin_headers)
    case.validate_response(response, checks=[not_a_server_error])
    if case.operation.method.upper() == "POST" and case.operation.path in ("/api/v1/jobs/", "/api/v1/jobs:batch"):
        STATUSES.append((case.operation.path, response.status_code))
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"code", "message", "details"}, body
        assert isinstance(body["details"], dict)


def test_the_fuzzing_reaches_job_creation():
    """The schema states the name pattern and the command, so generated submissions get past
    validation: some are created (201), not nearly all refused as malformed."""
    if not STATUSES:
        pytest.skip("runs after the fuzzing of POST /api/v1/jobs/ (run the whole module)")
    for path in ("/api/v1/jobs/", "/api/v1/jobs:batch"):
        assert (path, 201) in STATUSES, sorted(set(STATUSES))


def test_the_schema_states_the_job_name_pattern_and_the_body_errors():
    import json

    from django.test import Client

    spec = json.loads(Client().get("/api/schema/?format=json").content)
    name = spec["components"]["schemas"]["JobSubmit"]["properties"]["name"]
    assert name["pattern"] == "^/?[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*$"
    assert {"400", "401", "403", "404", "409", "413", "415", "429"} <= set(
        spec["paths"]["/api/v1/jobs/"]["post"]["responses"]
    )


def test_the_schema_is_valid_and_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    # --fail-on-warn exits non-zero on any drf-spectacular warning (an untyped field, a name clash).
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    text = (tmp_path / "schema.yaml").read_text()
    assert "/api/v1/jobs/{job_id}:cancel" in text
    assert "/api/v1/jobs:batch" in text
