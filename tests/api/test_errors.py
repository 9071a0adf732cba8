"""One JSON error shape for everything that can go wrong, and tokens."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.test import APIClient

from scheduler.foundation.errors import as_service_error
from tests.api.conftest import error_of
from tests.personas import PASSWORD

# --- tokens ---------------------------------------------------------------------------------------


def test_a_token_is_minted_for_the_right_password_and_works(alice):
    client = APIClient()
    response = client.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["username"], body["role"]) == ("alice", "researcher")
    client.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    # Each exchange mints its own token (issue 13, section 6: it used to hand back the same one).
    again = APIClient().post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")
    assert again.json()["token"] != body["token"]


@pytest.mark.parametrize("password", ["wrong", "CORRECT HORSE BATTERY STAPLE"])
def test_bad_credentials_are_unauthenticated(alice, password):
    response = APIClient().post("/api/v1/tokens/", {"username": "alice", "password": password}, format="json")
    assert response.status_code == 401
    assert error_of(response)["code"] == "UNAUTHENTICATED"


def test_an_unknown_user_is_unauthenticated_not_not_found(db):
    response = APIClient().post("/api/v1/tokens/", {"username": "mallory", "password": "x"}, format="json")
    assert (response.status_code, error_of(response)["code"]) == (401, "UNAUTHENTICATED")


@pytest.mark.parametrize(("body", "field"), [({"password": "x"}, "username"), ({"username": "alice"}, "password")])
def test_missing_credentials_are_invalid_argument(alice, body, field):
    response = APIClient().post("/api/v1/tokens/", body, format="json")
    assert response.status_code == 400
    assert error_of(response)["details"]["field"] == field


def test_minting_ignores_a_stale_token_header(alice):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json").status_code == 200


def test_password_guessing_is_locked_out(alice, settings):
    """The token endpoint is under the login lockout (django-axes), as the console's login is;
    its 30-a-minute throttles (tests/web/test_deploy_security.py) come after."""
    client = APIClient()
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [
        client.post("/api/v1/tokens/", {"username": "alice", "password": f"guess{i}"}, format="json").status_code
        for i in range(limit)
    ]
    assert statuses == [401] * (limit - 1) + [429]
    response = client.post("/api/v1/tokens/", {"username": "alice", "password": PASSWORD}, format="json")
    assert response.status_code == 429
    assert error_of(response)["code"] == "RESOURCE_EXHAUSTED"
    assert "Retry-After" in response.headers


# --- authentication -------------------------------------------------------------------------------


def test_anonymous_requests_are_unauthenticated_with_a_challenge(db):
    response = APIClient().get("/api/v1/jobs/")
    assert response.status_code == 401
    assert error_of(response)["code"] == "UNAUTHENTICATED"
    assert response.headers["WWW-Authenticate"].startswith("Token")


def test_a_bad_token_is_unauthenticated(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef")
    response = client.get("/api/v1/me/")
    assert (response.status_code, error_of(response)["code"]) == (401, "UNAUTHENTICATED")


def test_session_authentication_works_and_enforces_csrf_on_writes(alice):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    response = client.post("/api/v1/jobs/", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in error_of(response)["message"]


# --- every failure is JSON ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post", "put", "delete", "patch"])
@pytest.mark.parametrize("path", ["/api/v1/nothing-here", "/api/v1/jobs", "/api/elsewhere", "/api/v2/jobs/"])
def test_unknown_api_paths_are_json_not_found(as_alice, method, path):
    response = getattr(as_alice, method)(path)
    assert response.status_code == 404
    assert response.headers["Content-Type"].startswith("application/json")
    assert error_of(response)["code"] == "NOT_FOUND"


def test_pages_outside_the_api_keep_djangos_404(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert not response.headers["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", "/api/v1/jobs/"),
        ("put", "/api/v1/me/"),
        ("put", "/api/v1/tokens/"),
        ("patch", "/api/v1/jobs/alice/x"),
    ],
)
def test_a_wrong_method_is_json(as_alice, method, path):
    response = getattr(as_alice, method)(path)
    assert response.status_code == 405
    assert error_of(response)["code"] == "INVALID_ARGUMENT"


def test_malformed_json_is_invalid_argument(as_alice):
    response = as_alice.post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("malformed request body")


def test_a_form_body_is_unsupported_media_type_in_json(as_alice):
    response = as_alice.post("/api/v1/jobs/", {"name": "x"})  # multipart
    assert response.status_code == 415
    assert error_of(response)["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("path", ["/api/v1/budgets/", "/api/v1/me/"])
def test_an_unexpected_error_is_a_json_internal_error_and_is_logged(as_alice, monkeypatch, caplog, path):
    def broken(*args, **kwargs):
        raise RuntimeError("bug")

    # Where the budget read is looked up: the API view and (for /me/) the budget read model.
    monkeypatch.setattr("scheduler.api.views.budgets.budget_views", broken)
    monkeypatch.setattr("scheduler.budgets.queries.budget_views", broken)
    response = as_alice.get(path)
    assert response.status_code == 500
    body = error_of(response)
    assert body["code"] == "INTERNAL"
    assert "bug" not in body["message"]
    assert "RuntimeError: bug" in caplog.text


@pytest.mark.parametrize(
    ("exc", "code", "status"),
    [
        (drf.ValidationError({"device": {"count": ["must be at least 1"]}}), "INVALID_ARGUMENT", 400),
        (DjangoValidationError({"budget_limit": ["negative"]}), "INVALID_ARGUMENT", 400),
        (drf.ParseError(), "INVALID_ARGUMENT", 400),
        (drf.NotAuthenticated(), "UNAUTHENTICATED", 401),
        (drf.AuthenticationFailed(), "UNAUTHENTICATED", 401),
        (drf.PermissionDenied(), "PERMISSION_DENIED", 403),
        (drf.NotFound(), "NOT_FOUND", 404),
        (Http404("gone"), "NOT_FOUND", 404),
        (drf.MethodNotAllowed("DELETE"), "INVALID_ARGUMENT", 405),
        (drf.Throttled(wait=5), "RESOURCE_EXHAUSTED", 429),
        (DataError("integer out of range"), "INVALID_ARGUMENT", 400),
        (KeyError("surprise"), "INTERNAL", 500),
    ],
)
def test_every_exception_maps_to_a_stable_code(exc, code, status):
    error = as_service_error(exc)
    assert (error.code, error.status) == (code, status)


def test_nested_validation_errors_name_the_dotted_field():
    error = as_service_error(drf.ValidationError({"device": {"count": ["must be at least 1"]}}))
    assert error.message == "device.count: must be at least 1"
    assert error.details["field"] == "device.count"
    assert error.details["fields"] == {"device.count": ["must be at least 1"]}
