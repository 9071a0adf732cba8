"""Clients for the dispatch, reports and agent tests (personas: tests/personas.py).

alice owns the jobs, charlie is the outsider for alice's things, and ``agent`` is the agent of
worker w1, signed in with w1's own credential.
"""

from __future__ import annotations

import pytest

from scheduler import backends
from tests.personas import agent_client, token_client


@pytest.fixture(autouse=True)
def _fast_passwords(fast_passwords):
    """See ``fast_passwords`` in tests/conftest.py."""


@pytest.fixture(autouse=True)
def _builtin_backends():
    """Tests may register fake backends; every test starts and ends with the built-in ones."""
    yield
    for name in backends.backend_names():
        backends.unregister_backend(name)


@pytest.fixture
def personas(alice, charlie, olivia, ada):
    return {"alice": alice, "charlie": charlie, "olivia": olivia, "ada": ada}


@pytest.fixture
def clients(personas):
    result = {name: token_client(user) for name, user in personas.items()}
    result["anonymous"] = token_client(None)
    result["agent"] = agent_client("w1")
    return result
