"""Personas and builders for the dispatch, reports and agent tests.

alice owns the jobs, charlie is another researcher (the outsider for alice's things), olivia an
operator, ada an admin, and ``agent`` the token user worker agents sign in as (``iris-agents``).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler import backends
from scheduler.agent_api import AGENT_GROUP
from scheduler.roles import ensure_groups


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _builtin_backends():
    """Tests may register fake backends; every test starts and ends with the built-in ones."""
    yield
    for name in backends.backend_names():
        backends.unregister_backend(name)


def make_user(username: str, role: str = "researcher"):
    admins, operators = ensure_groups()
    user = get_user_model().objects.create_user(username=username, password="pw")
    if role == "admin":
        user.groups.add(admins)
    elif role == "operator":
        user.groups.add(operators)
    elif role == "agent":
        user.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    return user


@pytest.fixture
def personas(db):
    return {
        "alice": make_user("alice"),
        "charlie": make_user("charlie"),
        "olivia": make_user("olivia", "operator"),
        "ada": make_user("ada", "admin"),
        "agent": make_user("agent", "agent"),
    }


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
