"""How API calls authenticate with a person's token.

knox's ``TokenAuthentication`` reads, on every call, all of the caller's other tokens to delete
the expired ones: one statement per API call, for rows that are refused anyway. This class
checks only the presented token (an expired one is refused and deleted, as in knox); the others
are deleted by the hourly ``scheduler.delete_expired_tokens`` task
(:func:`scheduler.foundation.access.delete_expired_tokens`).

The lookup of the presented token and its user is one fixed statement, written out once and
sent as a prepared statement on PostgreSQL (``scheduler.store.prepared``), instead of a queryset
compiled again on every call (issue 26: about a tenth of a submission's web CPU). It reads the
same rows knox's ``filter(token_key=...).select_related("user")`` reads and builds the same
model instances from them; the digest comparison, the expiry, the inactive-user refusal and
every message are knox's.
"""

from __future__ import annotations

import binascii
import copy
import threading
from dataclasses import dataclass
from functools import lru_cache
from hmac import compare_digest
from time import monotonic

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from drf_spectacular.drainage import set_override
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS, knox_settings
from rest_framework import exceptions

from scheduler.jobs.token_ahead import Unverified
from scheduler.models import ApiToken
from scheduler.store import prepared


@lru_cache(maxsize=1)
def _token_lookup() -> tuple[str, list[str], list[str]]:
    """The lookup statement, and the token's and the user's column attribute names in its order."""
    user_model = get_user_model()
    token_fields = [f for f in ApiToken._meta.concrete_fields]
    user_fields = [f for f in user_model._meta.concrete_fields]
    quote = connection.ops.quote_name
    columns = [f"t.{quote(f.column)}" for f in token_fields] + [f"u.{quote(f.column)}" for f in user_fields]
    sql = (
        f"SELECT {', '.join(columns)} FROM {quote(ApiToken._meta.db_table)} t "
        f"JOIN {quote(user_model._meta.db_table)} u ON u.{quote(user_model._meta.pk.column)} = t.{quote('user_id')} "
        f"WHERE t.{quote('token_key')} = %s"
    )
    return sql, [f.attname for f in token_fields], [f.attname for f in user_fields]


def tokens_with_key(token_key: str) -> list[ApiToken]:
    """The tokens whose ``token_key`` is this one (knox allows several), each with its user
    attached, from one statement. Elsewhere than PostgreSQL knox's queryset (SQLite's values need
    Django's converters, and there is no parse/plan round trip to save)."""
    if connection.vendor != "postgresql":
        return list(ApiToken.objects.filter(token_key=token_key).select_related("user"))
    return tokens_of_rows(prepared.fetch(_token_lookup()[0], [token_key]))


def tokens_of_rows(rows: list[tuple]) -> list[ApiToken]:
    """The tokens (each with its user attached) of the rows of the lookup statement (PostgreSQL)."""
    _, token_names, user_names = _token_lookup()
    user_model = get_user_model()
    user_field = ApiToken._meta.get_field("user")
    split = len(token_names)
    tokens = []
    for row in rows:
        token = ApiToken.from_db(connection.alias, token_names, row[:split])
        user_field.set_cached_value(token, user_model.from_db(connection.alias, user_names, row[split:]))
        tokens.append(token)
    return tokens


class ApiTokenAuthentication(TokenAuthentication):
    """knox's token authentication without its per-call scan of the user's other tokens, and with
    its lookup as one prepared statement."""

    def authenticate_credentials(self, token: bytes):
        msg = _("Invalid token.")
        try:
            token = token.decode("utf-8")
        except UnicodeDecodeError:  # header bytes that no token is made of: a bad token, not a 500
            raise exceptions.AuthenticationFailed(msg) from None
        for auth_token in tokens_with_key(token[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if self._cleanup_token(auth_token):
                continue
            try:
                digest = hash_token(token)
            except (TypeError, binascii.Error):
                raise exceptions.AuthenticationFailed(msg) from None
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)
        raise exceptions.AuthenticationFailed(msg)

    def _cleanup_token(self, auth_token) -> bool:
        """True (and the token deleted) when the presented token has expired."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


class ApiTokenScheme(KnoxTokenScheme):
    """The schema's description of this class: knox's token scheme, unchanged."""

    target_class = "scheduler.api.authentication.ApiTokenAuthentication"


# Seconds a web process takes a token the stream has checked without checking it again. A
# watcher comes back with the same token after every answer (a busy user's twice a second),
# and each check was a statement. Within these seconds a deleted token, or a user made
# inactive, is still taken by the stream (by no other endpoint); expiry is checked every time.
TOKEN_CHECK_SECONDS = 10.0
# Checks remembered at most (all forgotten when full: a bound, not a policy).
TOKEN_CHECKS_KEPT = 10_000


class RepeatTokenAuthentication(ApiTokenAuthentication):
    """The API's token authentication, with a success remembered by this process for
    :data:`TOKEN_CHECK_SECONDS`, keyed by the token's digest (the hash knox stores, of the
    whole token: only its holder can hit it). Each request gets its own copy of the user."""

    _checked: dict[str, tuple[float, object, object]] = {}
    _lock = threading.Lock()

    def authenticate_credentials(self, token: bytes):
        try:
            digest = hash_token(token.decode("utf-8"))
        except (TypeError, ValueError):  # not hex (binascii.Error), not UTF-8: knox's refusal
            return super().authenticate_credentials(token)
        now = monotonic()
        with self._lock:
            checked = self._checked.get(digest)
        if checked is not None:
            at, user, auth_token = checked
            if now - at < TOKEN_CHECK_SECONDS and (auth_token.expiry is None or auth_token.expiry >= timezone.now()):
                return copy.copy(user), auth_token
        user, auth_token = super().authenticate_credentials(token)
        with self._lock:
            if len(self._checked) >= TOKEN_CHECKS_KEPT:
                self._checked.clear()
            self._checked[digest] = (now, user, auth_token)
        return copy.copy(user), auth_token


class RepeatTokenScheme(ApiTokenScheme):
    """The schema's description of :class:`RepeatTokenAuthentication`: the API's token scheme,
    the same ``knoxApiToken`` component (the same header, the same tokens)."""

    target_class = "scheduler.api.authentication.RepeatTokenAuthentication"


set_override(RepeatTokenAuthentication, "suppress_collision_warning", True)


# Users last authenticated by a token, keyed by the token's digest (the hash knox stores, of the
# whole token: only its holder can hit it), at most this many (all forgotten when full). Not a
# check: only a guess of whose token it is, which the check sent with the reads must confirm.
TOKEN_OWNERS_KEPT = 10_000
_owners: dict[str, Owner] = {}
_owners_lock = threading.Lock()


@dataclass(frozen=True)
class Owner:
    """Whom a token was last seen to authenticate: all a submission's identity needs before its
    reads (its budget identity is the username), and nothing a rule may trust."""

    pk: int
    username: str
    is_authenticated: bool = True


def remember_owner(digest: str, user) -> None:
    """``user`` authenticated with the token of ``digest`` (by knox's whole check)."""
    with _owners_lock:
        if len(_owners) >= TOKEN_OWNERS_KEPT:
            _owners.clear()
        _owners[digest] = Owner(user.pk, user.get_username())


def forget_owner(digest: str) -> None:
    """The token of ``digest`` failed a check ahead: its next request takes the ordinary way
    (which remembers it again only if it authenticates), so a token revoked since never again
    takes its former owner's submission lock ahead of its check."""
    with _owners_lock:
        _owners.pop(digest, None)


class TokenCheckAhead:
    """The API's token check of one submission, sent in the same round trip as its lock and rule
    reads instead of in one of its own before them (issue 26, ``submit37``; docs/operations.md,
    "The submission path").

    The lock and the reads are those of the user this token authenticated last time in this
    process (:func:`remember_owner`): :attr:`actor` is that :class:`Owner` until :meth:`verify`
    checks the token's rows, read by the statement :func:`tokens_with_key` sends, as
    :meth:`ApiTokenAuthentication.authenticate_credentials` checks them: the digest compared in
    constant time, the expiry, the user active; and that the user is the one guessed (same id,
    same username). Anything else (no such row any more, an expired token, a user made inactive
    or renamed) is :class:`~scheduler.jobs.token_ahead.Unverified`: the caller rolls back and
    answers the request the ordinary way, whose own token check refuses it with knox's messages
    (and deletes an expired token) or reads it again. Nothing is trusted from the guess.

    :meth:`for_request` returns None where this does not apply (no guess, knox's auto-refresh on,
    not PostgreSQL, a header knox would refuse)."""

    def __init__(self, token: str, digest: str, guessed: Owner) -> None:
        self.token_key = token[: CONSTANTS.TOKEN_KEY_LENGTH]
        self.digest = digest
        self.actor = guessed
        self.auth_token = None
        self.verified = False

    @staticmethod
    def _token(request) -> tuple[str, str] | None:
        if connection.vendor != "postgresql" or knox_settings.AUTO_REFRESH:
            return None
        try:
            words = request.META.get("HTTP_AUTHORIZATION", "").encode("iso-8859-1").split()
            if len(words) != 2:  # knox refuses these, with messages of their own
                return None
            token = words[1].decode("utf-8")
            return token, hash_token(token)
        except (TypeError, ValueError):  # not hex (binascii.Error), not UTF-8: knox's refusal
            return None

    @classmethod
    def digest_of(cls, request) -> str | None:
        """The digest of the request's token, where a check ahead applies to it."""
        token = cls._token(request)
        return None if token is None else token[1]

    @classmethod
    def for_request(cls, request) -> TokenCheckAhead | None:
        token = cls._token(request)
        guessed = None if token is None else _owners.get(token[1])
        return None if guessed is None else cls(*token, guessed)

    @property
    def statement(self) -> tuple[str, list]:
        return _token_lookup()[0], [self.token_key]

    def verify(self, rows: list[tuple]):
        """The user of the token, from the lookup statement's ``rows``, checked as above; the
        :attr:`actor` from then on."""
        now = timezone.now()
        for auth_token in tokens_of_rows(rows):
            if auth_token.expiry is not None and auth_token.expiry < now:
                raise Unverified("an expired token of this key")  # knox deletes it: the ordinary way does
            if compare_digest(self.digest, auth_token.digest):
                user = auth_token.user
                if not user.is_active or user.pk != self.actor.pk or user.get_username() != self.actor.username:
                    raise Unverified("not the user guessed, or inactive")
                self.actor, self.auth_token, self.verified = user, auth_token, True
                return user
        raise Unverified("no token of this digest")
