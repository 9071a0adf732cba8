"""Production settings and the console's defences: ``check --deploy`` is clean with production
settings, a published secret key is refused, console pages send a Content Security Policy, and
password guessing is locked out (console) or throttled (API) by account and by the real client
address, which a rotating ``X-Forwarded-For`` from an untrusted client does not change.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import stat
import subprocess
import sys

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.integration.subprocesses import ROOT
from tests.personas import PASSWORD

PRODUCTION = {
    "IRIS_DEBUG": "false",
    "IRIS_SECRET_KEY": secrets.token_urlsafe(50),
    "IRIS_ALLOWED_HOSTS": "iris.example.com",
    "IRIS_HSTS_SECONDS": "31536000",
    "IRIS_HSTS_INCLUDE_SUBDOMAINS": "true",
    "IRIS_HSTS_PRELOAD": "true",
    "IRIS_SSL_REDIRECT": "true",
    "IRIS_SECURE_COOKIES": "true",
    "IRIS_BEHIND_TLS_PROXY": "true",
    "IRIS_TRUSTED_PROXIES": "10.0.0.0/8",
}


def manage(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "IRIS_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize("key", ["insecure-dev-key-change-me-in-production", "django-insecure-" + "x" * 50, "short"])
def test_a_published_or_weak_secret_key_is_refused_when_debug_is_off(tmp_path, key):
    result = manage(tmp_path, "check", **{**PRODUCTION, "IRIS_SECRET_KEY": key})
    assert result.returncode != 0
    assert "ImproperlyConfigured: IRIS_SECRET_KEY is a published, placeholder or short" in result.stderr


def test_without_a_secret_key_the_data_dir_gets_one_of_its_own_kept_private(tmp_path):
    show = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = manage(tmp_path, "shell", "-c", show, IRIS_DEBUG="false")
    second = manage(tmp_path, "shell", "-c", show, IRIS_DEBUG="false")
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip().splitlines()[-1]
    assert len(key) >= 50 and key == second.stdout.strip().splitlines()[-1]
    assert key != manage(tmp_path / "other", "shell", "-c", show).stdout.strip().splitlines()[-1]
    key_file = tmp_path / "data" / "secret-key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


# --- Content Security Policy ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/queue/", "/jobs/", "/workers/", "/accounts/login/"])
def test_console_pages_send_a_content_security_policy_allowing_only_their_own_scripts(client, alice, path):
    client.force_login(alice)
    response = client.get(path)
    assert response.status_code == 200
    policy = dict(
        (part.split()[0], part.split()[1:])
        for part in response.headers["Content-Security-Policy"].split(";")
        if part.strip()
    )
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]


def test_templates_have_no_inline_scripts_event_handlers_or_style_elements():
    """What the policy forbids must not be in the pages (it would silently stop working)."""
    offenders = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        if re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text) or re.search(r"<style\b", text):
            offenders.append(f"{path.name}: inline <script> or <style>")
        if re.search(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", text):
            offenders.append(f"{path.name}: inline event handler")
        if "javascript:" in text:
            offenders.append(f"{path.name}: javascript: URL")
    assert offenders == []


# --- password guessing ----------------------------------------------------------------------------


@pytest.fixture
def fresh_counts(db, settings):
    """Throttle counters live in the cache and lockouts in the database; each test starts clean."""
    settings.TRUSTED_PROXIES = ()
    cache.clear()
    yield settings
    cache.clear()


def console_login(client, username: str, password: str, forwarded_for: str | None = None, peer: str = "198.51.100.7"):
    extra = {"REMOTE_ADDR": peer}
    if forwarded_for:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded_for
    return client.post("/accounts/login/", {"username": username, "password": password}, **extra)


def logged_in(response) -> bool:
    return response.status_code == 302 and response.headers["Location"] == "/"


def test_console_login_locks_the_account_after_failures_whatever_x_forwarded_for_says(client, alice, fresh_counts):
    fresh_counts.AXES_FAILURE_LIMIT = 5
    statuses = [
        console_login(client, "alice", f"guess{i}", forwarded_for=f"203.0.113.{i}").status_code for i in range(5)
    ]
    assert statuses == [200, 200, 200, 200, 429]  # the form again, four times; then the lockout
    # The right password, from an address never seen (a real one, not a forged header): locked.
    response = console_login(client, "alice", PASSWORD, peer="192.0.2.50")
    assert response.status_code == 429 and not logged_in(response)


def test_console_login_locks_the_client_address_after_failures_on_many_accounts(client, alice, fresh_counts):
    fresh_counts.AXES_FAILURE_LIMIT = 5
    for i in range(5):
        console_login(client, f"nobody{i}", "guess", forwarded_for=f"203.0.113.{i}, 10.0.0.{i}")
    # alice's own right password from that client, under yet another forged header: locked.
    response = console_login(client, "alice", PASSWORD, forwarded_for="203.0.113.99")
    assert response.status_code == 429 and not logged_in(response)


def test_behind_a_trusted_proxy_the_forwarded_client_is_the_one_locked_out(client, alice, bob, fresh_counts):
    fresh_counts.AXES_FAILURE_LIMIT = 5
    fresh_counts.TRUSTED_PROXIES = (ipaddress.ip_network("10.0.0.0/8"),)
    for i in range(5):
        console_login(client, f"nobody{i}", "guess", forwarded_for="203.0.113.1", peer="10.0.0.2")
    assert console_login(client, "alice", PASSWORD, forwarded_for="203.0.113.1", peer="10.0.0.2").status_code == 429
    # Another client behind the same proxy is not locked out with the first one.
    assert logged_in(console_login(client, "bob", PASSWORD, forwarded_for="203.0.113.2", peer="10.0.0.2"))


def test_token_endpoint_throttle_is_not_reset_by_a_rotating_x_forwarded_for(alice, bob, fresh_counts):
    fresh_counts.AXES_FAILURE_LIMIT = 100  # the throttle under test, not the lockout (below)
    client = APIClient()
    statuses = [
        client.post(
            "/api/v1/tokens/",
            {"username": f"user{i}", "password": "guess"},
            format="json",
            REMOTE_ADDR="198.51.100.7",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{i}",
        ).status_code
        for i in range(31)
    ]
    assert statuses[:30] == [401] * 30 and statuses[30] == 429


def test_token_endpoint_throttles_guesses_at_one_account_from_many_addresses(alice, fresh_counts):
    fresh_counts.AXES_FAILURE_LIMIT = 100  # the throttle under test, not the lockout (below)
    client = APIClient()
    statuses = [
        client.post(
            "/api/v1/tokens/", {"username": "alice", "password": f"guess{i}"}, format="json", REMOTE_ADDR=f"192.0.2.{i}"
        ).status_code
        for i in range(31)
    ]
    assert statuses[:30] == [401] * 30 and statuses[30] == 429


def test_failed_cli_logins_count_toward_the_console_lockout_and_log_no_error(alice, fresh_counts, caplog):
    """``iris login`` (POST tokens/) is under django-axes as the console is: it used to call
    ``authenticate`` without the request, so axes logged two ERROR lines per failure and counted
    nothing. Locked out, the API answers in its own JSON."""
    fresh_counts.AXES_FAILURE_LIMIT = 3
    client = APIClient()

    def token_login(password):
        return client.post(
            "/api/v1/tokens/", {"username": "alice", "password": password}, format="json", REMOTE_ADDR="198.51.100.7"
        )

    with caplog.at_level(logging.INFO):
        statuses = [token_login(f"guess{i}").status_code for i in range(3)]
    assert statuses == [401, 401, 429]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    locked = token_login(PASSWORD)
    assert locked.status_code == 429
    assert locked.json()["code"] == "RESOURCE_EXHAUSTED"
    assert locked.json()["message"].startswith("too many failed logins for this account or address")
