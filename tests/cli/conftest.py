"""The CLI against a live test server.

``iris`` runs in-process (``iris_cli.main(argv)``) with ``HOME`` in a temporary directory,
so its credentials file is the test's own, and ``IRIS_SERVER``/``IRIS_TOKEN`` unset unless a
test sets them. The server is pytest-django's ``live_server`` on the test database, so every
request goes through the real HTTP stack, middleware, authentication and services.

Personas as in the API tests: alice and bob are researchers (bob's tier allows BATCH only),
olivia is an operator, ada an admin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from iris_cli import main
from scheduler.core.bands import Band
from scheduler.models import ApiToken, UserBudget
from tests.personas import FAST_PASSWORD_HASHERS, PASSWORD, make_user

PERSONAS = (("alice", "researcher"), ("bob", "researcher"), ("olivia", "operator"), ("ada", "admin"))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


class Iris:
    """Runs ``iris ARGS...`` in-process and returns its exit code and output."""

    def __init__(self, server: str, capsys, monkeypatch):
        self.server = server
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *argv: str) -> Result:
        self.capsys.readouterr()
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return Result(code, out, err)

    def run(self, *argv: str) -> Result:
        """Runs the installed ``iris`` console script as a subprocess, as a person types it."""
        return self.run_input("", *argv)

    def run_input(self, stdin: str, *argv: str) -> Result:
        """``run``, answering its prompts with ``stdin``."""
        script = Path(sys.executable).with_name("iris")
        done = subprocess.run(
            [str(script), *argv], input=stdin, capture_output=True, text=True, env=dict(os.environ), timeout=60
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def login(self, username: str) -> Result:
        result = self("login", "--server", self.server, "--username", username, "--password", PASSWORD)
        assert result.code == 0, result.err
        return result

    def use_token(self, username: str) -> None:
        """Skip the login: point IRIS_SERVER/IRIS_TOKEN at the live server as ``username``."""
        _, key = ApiToken.objects.create(user=get_user_model().objects.get(username=username), name="tests")
        self.monkeypatch.setenv("IRIS_SERVER", self.server)
        self.monkeypatch.setenv("IRIS_TOKEN", key)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The token endpoint's throttle counts in the cache; tests must not share the count."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def personas(transactional_db, settings):
    """The shared personas (``tests.personas``) on a transactional database, which the live server
    needs; bob's tier allows BATCH only."""
    settings.PASSWORD_HASHERS = FAST_PASSWORD_HASHERS
    users = {name: make_user(name, role) for name, role in PERSONAS}
    UserBudget.objects.create(user_id="bob", budget_limit=1000, max_band=Band.BATCH)
    return users


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("IRIS_SERVER", raising=False)
    monkeypatch.delenv("IRIS_TOKEN", raising=False)
    return home


@pytest.fixture
def iris(live_server, personas, home, capsys, monkeypatch) -> Iris:
    return Iris(live_server.url, capsys, monkeypatch)
