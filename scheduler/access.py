"""Who the caller is and what they may do: the checks every use case runs on its actor first,
in the vocabulary of :mod:`scheduler.roles`, and the API token exchange.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from rest_framework.authtoken.models import Token

from scheduler import roles
from scheduler.errors import InvalidArgument, PermissionDenied, Unauthenticated
from scheduler.inputs import check_text, parse_text
from scheduler.models import Job


def require_authenticated(actor) -> None:
    if actor is None or not actor.is_authenticated:
        raise Unauthenticated("sign in first: send 'Authorization: Token <key>' (iris login) or use a session")


def require_admin(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_admin(actor):
        raise PermissionDenied(f"only admins may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})")


def require_operator(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_operator(actor):
        raise PermissionDenied(
            f"only operators may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})"
        )


def owns_job(actor, job: Job) -> bool:
    """The budget identity of a job is its root's submitter: they own the whole tree."""
    return job.user == actor.username or roles.is_admin(actor)


def mint_token(username: Any, password: Any) -> tuple[str, Any]:
    """Exchange a username and password for the user's API token (created on first use)."""
    user_name = parse_text(username, "username", required=True, max_length=150)
    if not isinstance(password, str) or not password:
        raise InvalidArgument("required", field="password")
    check_text(password, "password")
    user = authenticate(username=user_name, password=password)
    if user is None or not user.is_active:
        raise Unauthenticated("wrong username or password")
    token, _ = Token.objects.get_or_create(user=user)
    return token.key, user
