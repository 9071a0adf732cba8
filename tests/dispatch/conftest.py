"""Clients for the dispatch, reports and agent tests (personas: tests/personas.py).

alice owns the jobs, charlie is the outsider for alice's things, and ``agent`` is the token
user worker agents sign in as.
"""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler import backends


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
def personas(alice, charlie, olivia, ada, agent):
    return {"alice": alice, "charlie": charlie, "olivia": olivia, "ada": ada, "agent": agent}


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def clients(personas):
    result = {name: client_for(user) for name, user in personas.items()}
    result["anonymous"] = APIClient()
    return result
