"""Who the caller is and what they may do: the checks every use case runs on its actor first,
in the vocabulary of :mod:`scheduler.foundation.roles`, and people's API tokens.

API tokens are django-rest-knox tokens (``scheduler.models.ApiToken``): stored as their SHA-512
digest, one per device or purpose (each exchange of a password mints a new one), expiring after
``IRIS_TOKEN_TTL_HOURS``, listed and revoked by their owner and by admins. A token's public id is
its ``token_key`` (its first 15 characters, which knox stores to find it); that is not enough
to use it.

API calls authenticate with :class:`scheduler.api.authentication.ApiTokenAuthentication`: knox's, except that a request no
longer reads all of its user's other tokens to delete their expired ones (one statement per API
call); expired tokens are deleted by a periodic task instead (:func:`delete_expired_tokens`). A
token that has expired is refused (and deleted) when used, as before.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.db.models import QuerySet
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.foundation.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from scheduler.foundation.inputs import check_text, parse_text
from scheduler.models import ApiToken, Job


def require_authenticated(actor) -> None:
    if actor is None or not actor.is_authenticated:
        raise Unauthenticated("sign in first: send 'Authorization: Token <key>' (iris login) or use a session")


def require_admin(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_admin(actor):
        raise PermissionDenied(
            f"only admins may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})"
        )


def require_operator(actor, action: str) -> None:
    require_authenticated(actor)
    if not roles.is_operator(actor):
        raise PermissionDenied(
            f"only operators may {action}; you are signed in as '{actor.username}' ({roles.role_name(actor)})"
        )


def owns_job(actor, job: Job) -> bool:
    """The budget identity of a job is its root's submitter: they own the whole tree."""
    return job.user == actor.username or roles.is_admin(actor)


def delete_expired_tokens(now) -> int:
    """Delete every API token past its expiry (they are refused anyway); the number deleted."""
    deleted, _ = ApiToken.objects.filter(expiry__lt=now).delete()
    return deleted


# Longest device or purpose name of a token.
MAX_TOKEN_NAME = 100


def mint_token(username: Any, password: Any, name: Any = None, *, request=None) -> tuple[str, ApiToken]:
    """Exchange a username and password for a new API token named ``name`` (a device or a
    purpose). Returns the token, shown this once, and its row. ``request`` (the HTTP request the
    credentials came in) puts the exchange under the console's login lockout (django-axes):
    failures count against the account and the address, and a locked one is refused."""
    user_name = parse_text(username, "username", required=True, max_length=150)
    if not isinstance(password, str) or not password:
        raise InvalidArgument("required", field="password")
    check_text(password, "password")
    label = parse_text(name, "name", max_length=MAX_TOKEN_NAME) or ""
    user = authenticate(request, username=user_name, password=password)
    if user is None or not user.is_active:
        raise Unauthenticated("wrong username or password")
    row, key = ApiToken.objects.create(user=user, name=label)
    return key, row


def api_tokens(actor, *, user: Any = None) -> QuerySet[ApiToken]:
    """Live API tokens, newest first: the actor's own, or ``user``'s (admins only; ``"*"``: everyone's)."""
    require_authenticated(actor)
    wanted = parse_text(user, "user", max_length=150) or actor.username
    if wanted != actor.username and not roles.is_admin(actor):
        raise PermissionDenied(f"only admins may list other users' tokens; you are signed in as '{actor.username}'")
    tokens = ApiToken.objects.select_related("user").exclude(expiry__lte=timezone.now()).order_by("-created")
    if wanted != "*":
        tokens = tokens.filter(user__username=wanted)
    return tokens


def revoke_token(actor, token_id: Any) -> ApiToken:
    """Revoke the API token whose id (``token_key``) is ``token_id``: its owner or an admin may."""
    require_authenticated(actor)
    key = parse_text(token_id, "id", required=True, max_length=32)
    row = ApiToken.objects.select_related("user").filter(token_key=key).first()
    if row is None:
        raise NotFound(f"no token {key}", field="id")
    if row.user_id != actor.pk and not roles.is_admin(actor):
        raise PermissionDenied(
            f"only its owner and admins may revoke token {key}; you are signed in as '{actor.username}'"
        )
    row.delete()
    return row
