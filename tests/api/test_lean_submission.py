"""The lean route of ``POST jobs/`` (``scheduler/api/lean.py``) answers exactly as DRF's
``JobsView`` does: every case is sent twice, once with the project's MIDDLEWARE (an ordinary
token submission takes the lean route) and once without ``LeanSubmissionMiddleware`` (the
whole way through DRF, as before it), each on the same database state, and the two answers must
be equal in status, every header and body (times masked as in the golden test). A spy on
``JobsView.dispatch`` shows which way each request went, so no comparison passes by both
going through DRF."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from scheduler.api.views import JobsView
from scheduler.models import ApiToken
from tests.api.test_submission_bodies import CASES, _mask, _send
from tests.personas import make_worker, submit, token_client

LEAN = "iris_web.middleware.LeanSubmissionMiddleware"
JOBS = "/api/v1/jobs/"
FULL_WAY = [path for path in settings.MIDDLEWARE if path != LEAN]

# The golden cases the lean route does not take: no token, an empty body, a form body.
NOT_LEAN = {"anonymous", "empty_body", "form_body"}


def _answer(response) -> dict:
    """Status, every header (Content-Length held to the body's length: times vary), and the body."""
    headers = dict(response.headers)
    if "Content-Length" in headers:
        assert int(headers.pop("Content-Length")) == len(response.content)
        headers["Content-Length"] = "<the body's>"
    try:
        body = _mask(json.loads(response.content))
    except ValueError:
        body = response.content.decode(errors="replace")
    return {"status": response.status_code, "headers": headers, "body": body}


@contextmanager
def _undone():
    """Whatever runs inside is rolled back after (so both ways start from the same rows)."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def _both_ways(send, middleware=None) -> tuple[dict, dict, int]:
    """``send(lean)`` once through the project's middleware and once the whole way; the two
    answers, and how many of the first went through DRF."""
    answers = {}
    calls = {True: 0, False: 0}
    dispatch = JobsView.dispatch
    for lean in (True, False):

        def spy(view, request, *args, _lean=lean, **kwargs):
            calls[_lean] += 1
            return dispatch(view, request, *args, **kwargs)

        stack = middleware if middleware is not None else settings.MIDDLEWARE
        with _undone(), override_settings(MIDDLEWARE=stack if lean else FULL_WAY):
            with mock.patch.object(JobsView, "dispatch", spy):
                answers[lean] = send(lean)
    return answers[True], answers[False], calls[True]


@pytest.fixture
def personas(alice, bob, ada):
    make_worker("w1", cpu=32, memory_gib=256)
    submit(alice, "parent")
    return {"alice": alice, "bob": bob, "ada": ada}


def _client(personas, persona: str, **extra):
    if persona == "bad-token":
        client = token_client(None)
        client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 64)
        return client
    return token_client(personas.get(persona))


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_every_golden_case_is_answered_as_drf_answers_it(personas, case):
    name, persona, body, content_type = case

    def send(lean):
        return {k: _answer(_send(_client(personas, persona), body, content_type)) for k in ("first", "again")}

    lean, full, through_drf = _both_ways(send)
    assert lean == full
    assert through_drf == (2 if name in NOT_LEAN else 0)


def _post(client, body=None, **extra):
    data = json.dumps(body if body is not None else {"name": "x", "command": ["true"]})
    return _answer(client.generic("POST", JOBS, data.encode(), content_type="application/json", **extra))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    ["Token", "Token a b", "token " + "0" * 64, "TOKEN  " + "0" * 64, "Token zz"],
    ids=["no-key", "spaces", "lower-case", "upper-case-two-spaces", "not-hex"],
)
def test_malformed_and_unknown_tokens_are_refused_as_drf_refuses_them(personas, header):
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(None), HTTP_AUTHORIZATION=header))
    assert lean == full and lean["status"] == 401
    assert lean["headers"]["WWW-Authenticate"] == "Token"
    assert through_drf == 0


@pytest.mark.django_db
def test_expired_tokens_and_inactive_users_are_refused_as_drf_refuses_them(personas, alice, bob):
    _, expired = ApiToken.objects.create(user=alice, name="old", expiry=timedelta(hours=1))
    ApiToken.objects.filter(user=alice, name="old").update(expiry=timezone.now() - timedelta(seconds=1))
    _, inactive = ApiToken.objects.create(user=bob, name="bob")
    bob.is_active = False
    bob.save()
    for key in (expired, inactive):
        lean, full, through_drf = _both_ways(
            lambda lean, key=key: _post(token_client(None), HTTP_AUTHORIZATION=f"Token {key}")
        )
        assert lean == full and lean["status"] == 401, lean
        assert through_drf == 0


@pytest.mark.django_db
def test_a_header_knox_does_not_take_goes_the_whole_way_to_the_same_401(personas):
    """A no-break space is whitespace to ``str.split`` but not to knox's split of the bytes."""
    header = "Token\xa0" + "0" * 64
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(None), HTTP_AUTHORIZATION=header))
    assert lean == full and lean["status"] == 401
    assert through_drf == 1


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_is_the_same_413(personas, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000
    body = {"name": "x", "command": ["x" * 2_000]}
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"]), body))
    assert lean == full and lean["status"] == 413
    assert through_drf == 0


@pytest.mark.django_db
def test_the_unfinished_task_cap_is_the_same_429(personas, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 2
    body = {"name": "more", "command": ["true"], "replicas": 2}
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"]), body))
    assert lean == full and lean["status"] == 429
    assert through_drf == 0


@pytest.mark.django_db
def test_an_unexpected_error_is_the_same_logged_500(personas, caplog):
    boom = mock.Mock(side_effect=RuntimeError("boom"))
    with mock.patch("scheduler.api.lean.submit_job", boom), mock.patch("scheduler.api.views.jobs.submit_job", boom):
        lean, full, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"])))
    assert lean == full and lean["status"] == 500 and lean["body"]["code"] == "INTERNAL"
    assert through_drf == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "scheduler.foundation.errors"]
    assert logged == ["unhandled error in JobsView"] * 2


@pytest.mark.django_db
@pytest.mark.parametrize("accept", ["*/*", "application/json"])
def test_json_accepts_take_the_lean_route_with_the_same_answer(personas, accept):
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"]), HTTP_ACCEPT=accept))
    assert lean == full and lean["status"] == 201
    assert through_drf == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"HTTP_ACCEPT": "text/html"},  # the browsable API
        {"HTTP_ACCEPT": "application/json; indent=4"},
        {"QUERY_STRING": "format=api"},
        {"HTTP_COOKIE": "csrftoken=bad"},  # the CSRF middleware renews a malformed cookie
    ],
    ids=["html", "indent", "format", "cookie"],
)
def test_other_requests_go_the_whole_way(personas, extra):
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"]), **extra))
    assert lean["status"] == full["status"] == 201
    assert through_drf == 1


@pytest.mark.django_db
def test_the_security_middleware_and_host_checks_still_apply(personas):
    alice = personas["alice"]
    lean, full, through_drf = _both_ways(lambda lean: _post(token_client(alice), HTTP_HOST="evil.example"))
    assert lean == full and lean["status"] == 400  # ALLOWED_HOSTS (CommonMiddleware's get_host)
    assert through_drf == 0
    with override_settings(SECURE_SSL_REDIRECT=True):
        lean, full, through_drf = _both_ways(lambda lean: _post(token_client(alice)))
    assert lean == full and lean["status"] == 301
    with override_settings(SECURE_HSTS_SECONDS=3600):
        lean, full, through_drf = _both_ways(lambda lean: _post(token_client(alice), secure=True))
    assert lean == full and lean["headers"]["Strict-Transport-Security"] == "max-age=3600"
    assert lean["headers"]["X-Frame-Options"] == "DENY" and lean["headers"]["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
def test_a_middleware_the_lean_route_does_not_know_turns_it_off(personas):
    extra = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    _, _, through_drf = _both_ways(lambda lean: _post(token_client(personas["alice"])), middleware=extra)
    assert through_drf == 1


def test_the_view_asks_only_what_the_lean_route_checks():
    """The lean route authenticates with the view's first class, needs no permission beyond
    signing in, applies no throttle, parses with the API's JSON parser and renders with DRF's JSON
    renderer: if JobsView changes any of this, the lean route must change with it."""
    from rest_framework.renderers import JSONRenderer

    from scheduler.api.authentication import ApiTokenAuthentication
    from scheduler.api.parsers import JSONParser
    from scheduler.api.permissions import IsResearcher

    assert JobsView.authentication_classes[0] is ApiTokenAuthentication
    assert JobsView.permission_classes == [IsResearcher]
    assert JobsView.throttle_classes == []
    assert JobsView.parser_classes == [JSONParser]
    assert JobsView.renderer_classes[0] is JSONRenderer
    assert settings.MIDDLEWARE[0] == LEAN


# --- the token checked with the reads (issue 26, submit37) ------------------------------------------


def _keyed_client(key: str):
    """A new API client (a client builds its middleware once) sending ``Token key``."""
    client = token_client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _seen_client(user, **token):
    """A way to make API clients with a new token of ``user`` that this process has seen
    authenticate (one lean submission made with it), so its next submissions check it with
    their reads; and the token's row."""
    _, key = ApiToken.objects.create(user=user, name="seen", **token)
    assert _post(_keyed_client(key), {"name": f"warm-{key[:6]}", "command": ["true"]})["status"] == 201
    return (lambda: _keyed_client(key)), ApiToken.objects.get(user=user, name="seen")


@contextmanager
def _checks_ahead():
    """Counts the token checks made with a submission's reads (``TokenCheckAhead.verify``)."""
    from scheduler.api.authentication import TokenCheckAhead

    with mock.patch.object(TokenCheckAhead, "verify", autospec=True, side_effect=TokenCheckAhead.verify) as verify:
        yield verify


@pytest.mark.django_db
@pytest.mark.parametrize("case", [c for c in CASES if c[1] in ("alice", "bob", "ada")], ids=lambda c: c[0])
def test_with_a_token_seen_before_every_golden_case_is_answered_as_drf_answers_it(personas, case):
    """The token checked with the lock and the reads (PostgreSQL) answers every case as DRF does,
    the admin's SYSTEM job included (the rules see the user the check read, not the guess)."""
    name, persona, body, content_type = case
    client, _ = _seen_client(personas[persona])
    with _checks_ahead() as verify:
        lean, full, through_drf = _both_ways(lambda lean: _answer(_send(client(), body, content_type)))
    assert lean == full
    assert through_drf == (1 if name in NOT_LEAN else 0)
    if connection.vendor == "postgresql" and name not in NOT_LEAN:
        # Checked ahead unless the body was refused first or names a parent or a full id.
        assert verify.call_count <= 1


@pytest.mark.django_db
def test_a_token_seen_before_goes_with_the_reads_on_postgresql(personas):
    client, _ = _seen_client(personas["alice"])
    with _checks_ahead() as verify:
        assert _post(client(), {"name": "next", "command": ["true"]})["status"] == 201
    assert verify.call_count == (1 if connection.vendor == "postgresql" else 0)


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["deleted", "expired", "inactive", "renamed", "other-token", "replaced"])
def test_a_token_seen_before_and_changed_since_is_answered_as_drf_answers_it(personas, bob, change):
    """What the token check refuses after the process has seen the token authenticate (it was
    deleted, it expired, its user was made inactive), or what it cannot take as guessed (its
    user renamed): the same answer as DRF's, for a valid body, for a body refused before any
    read and for one refused by a rule, so no refusal says more than the 401."""
    client, token = _seen_client(bob, expiry=timedelta(hours=1))
    if change == "deleted":
        token.delete()
    elif change == "expired":
        ApiToken.objects.filter(digest=token.digest).update(expiry=timezone.now() - timedelta(seconds=1))
    elif change == "inactive":
        bob.is_active = False
        bob.save()
    elif change == "renamed":
        bob.username = "robert"
        bob.save()
    else:  # another token of the same key prefix: the check reads every token of the key
        other = ApiToken.objects.get(digest=token.digest)
        other.digest, other.name = "f" * len(other.digest), "other"
        other.save(force_insert=True)
        if change == "replaced":  # only the other one is left: the digests must differ
            token.delete()
    bodies = [
        {"name": "again", "command": ["true"]},
        {"name": "a/b", "command": ["true"]},
        {"name": "big", "command": ["true"], "replicas": 10**9},
        {"name": "hero", "command": ["true"], "priority": "system", "system_reason": "hero run"},
    ]
    statuses = []
    with _checks_ahead() as verify:
        for body in bodies:
            lean, full, through_drf = _both_ways(lambda lean, body=body: _post(client(), body))
            assert lean == full, (change, body)
            assert through_drf == 0
            statuses.append(lean["status"])
    valid = change in ("renamed", "other-token")  # "replaced": the presented token is gone
    assert statuses == ([201, 400, 422, 403] if valid else [401] * 4), statuses
    if not valid:  # a failed check forgets the token: no lock is taken ahead for it again
        assert verify.call_count == (1 if connection.vendor == "postgresql" else 0)
    if change == "expired":  # refused and deleted, as knox does
        assert _post(client())["status"] == 401
        assert not ApiToken.objects.filter(digest=token.digest).exists()
