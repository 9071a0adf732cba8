"""The console's middleware is skipped for token-authenticated API calls (iris_web/middleware.py),
and only for them: session calls to the API still load the session and still need CSRF."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import error_of


def test_a_token_call_skips_the_consoles_middleware(as_alice, alice, monkeypatch):
    from django.contrib.sessions.backends.db import SessionStore

    loaded = []
    monkeypatch.setattr(SessionStore, "load", lambda self: loaded.append(self) or {})
    as_alice.cookies["sessionid"] = "a-session-cookie"  # a browser's cookie sent along is not read
    response = as_alice.get("/api/v1/me/")
    assert response.json()["username"] == "alice"
    assert loaded == []
    assert "Content-Security-Policy" not in response.headers  # a JSON answer, not a page
    assert response.headers["X-Content-Type-Options"] == "nosniff"  # SecurityMiddleware still runs


def test_a_token_write_needs_no_csrf_token(alice):
    from scheduler.models import ApiToken

    client = APIClient(enforce_csrf_checks=True)
    _, key = ApiToken.objects.create(user=alice, name="tests")
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post("/api/v1/jobs/", {"name": "x", "command": ["true"]}, format="json")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("path", ["/api/v1/me/", "/api/v1/jobs/"])
def test_the_browsable_apis_html_pages_carry_the_content_security_policy_for_token_calls(as_alice, path):
    page = as_alice.get(path, HTTP_ACCEPT="text/html")

    assert page["Content-Type"].startswith("text/html")
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_a_session_call_to_the_api_still_loads_the_session_and_needs_csrf(alice):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    me = client.get("/api/v1/me/")
    assert me.json()["username"] == "alice"
    assert "Content-Security-Policy" in me.headers
    response = client.post("/api/v1/jobs/", {"name": "x", "command": ["true"]}, format="json")
    assert response.status_code == 403 and "CSRF" in error_of(response)["message"]


def test_a_console_page_keeps_every_middleware(client, db):
    from django.urls import reverse

    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert "Content-Security-Policy" in response.headers and "csrftoken" in response.cookies


def test_a_bad_token_is_still_refused_without_the_session(alice):
    client = APIClient()
    client.force_login(alice)  # a valid session does not rescue a bad token
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef")
    response = client.get("/api/v1/me/")
    assert (response.status_code, error_of(response)["code"]) == (401, "UNAUTHENTICATED")
