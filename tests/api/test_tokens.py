"""API tokens (issue 13, §6): hashed, one per device or purpose, expiring, listed and revoked
by their owner and admins."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from scheduler.models import ApiToken
from tests.api.conftest import error_of
from tests.personas import PASSWORD, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()
    yield
    cache.clear()


def mint(client, username: str = "alice", name: str = "laptop") -> dict:
    response = client.post("/api/v1/tokens/", {"username": username, "password": PASSWORD, "name": name}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def bearer(token: str):
    client = token_client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_each_exchange_mints_a_new_token_and_both_work(clients, alice):
    first = mint(clients["anonymous"], name="laptop")
    second = mint(clients["anonymous"], name="ci")

    assert first["token"] != second["token"]
    assert first["name"] == "laptop" and first["expires_at"]
    for answer in (first, second):
        assert bearer(answer["token"]).get("/api/v1/me/").json()["username"] == "alice"


def test_the_database_never_holds_the_token(clients, alice):
    token = mint(clients["anonymous"])["token"]

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM scheduler_apitoken")
        rows = cursor.fetchall()
    assert rows and not any(token in str(value) for row in rows for value in row)
    assert "authtoken_token" not in connection.introspection.table_names()


def test_a_token_expires_after_the_configured_lifetime(clients, alice, settings):
    answer = mint(clients["anonymous"])
    assert timezone.now() + timedelta(hours=settings.TOKEN_TTL_HOURS - 1) < ApiToken.objects.get(name="laptop").expiry
    ApiToken.objects.filter(name="laptop").update(expiry=timezone.now() - timedelta(seconds=1))

    response = bearer(answer["token"]).get("/api/v1/me/")

    assert response.status_code == 401
    assert error_of(response)["code"] == "UNAUTHENTICATED"


def test_an_expired_token_is_deleted_when_used(clients, alice):
    answer = mint(clients["anonymous"])
    ApiToken.objects.filter(name="laptop").update(expiry=timezone.now() - timedelta(seconds=1))
    assert bearer(answer["token"]).get("/api/v1/me/").status_code == 401
    assert not ApiToken.objects.filter(name="laptop").exists()


def test_a_call_does_not_read_the_users_other_tokens_and_the_periodic_task_deletes_expired_ones(clients, alice):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.tasks import delete_expired_tokens

    live = mint(clients["anonymous"], name="laptop")
    mint(clients["anonymous"], name="old")
    ApiToken.objects.filter(name="old").update(expiry=timezone.now() - timedelta(seconds=1))
    client = bearer(live["token"])
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/me/").status_code == 200
    token_reads = [q["sql"] for q in queries if "scheduler_apitoken" in q["sql"]]
    assert len(token_reads) == 1  # the token itself (knox also read all of alice's tokens)
    assert ApiToken.objects.filter(name="old").exists()  # no longer deleted by someone else's call

    delete_expired_tokens()

    assert not ApiToken.objects.filter(name="old").exists() and ApiToken.objects.filter(name="laptop").exists()


def test_expired_tokens_are_deleted_hourly_on_beat(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["delete-expired-tokens"]
    assert (entry["task"], entry["schedule"]) == ("scheduler.delete_expired_tokens", 3600.0)


def test_the_owner_lists_their_tokens_without_the_tokens_themselves(clients, alice, bob):
    mine = mint(clients["anonymous"], name="laptop")
    mint(clients["anonymous"], "bob", name="bobs")

    listed = bearer(mine["token"]).get("/api/v1/tokens/").json()

    # alice's own tokens only (the fixture's client has one named "tests"); this one is current.
    assert {row["username"] for row in listed} == {"alice"}
    assert [(row["id"], row["name"]) for row in listed if row["current"]] == [(mine["id"], "laptop")]
    assert mine["token"] not in str(listed)


@pytest.mark.parametrize(
    ("persona", "status"), [("alice", 204), ("ada", 204), ("bob", 403), ("olivia", 403), ("anonymous", 401)]
)
def test_a_token_is_revoked_by_its_owner_or_an_admin_and_no_one_else(clients, users, persona, status):
    victim = mint(clients["anonymous"], name="laptop")

    response = clients[persona].delete(f"/api/v1/tokens/{victim['id']}")

    assert response.status_code == status, response.content
    works = bearer(victim["token"]).get("/api/v1/me/").status_code == 200
    assert works is (status != 204)
    if status >= 400:
        error_of(response)


def test_admins_list_anyones_tokens_and_others_may_not(clients, users):
    mint(clients["anonymous"], name="laptop")

    listed = clients["ada"].get("/api/v1/tokens/?user=alice").json()
    assert {row["username"] for row in listed} == {"alice"} and "laptop" in {row["name"] for row in listed}
    assert clients["bob"].get("/api/v1/tokens/?user=alice").status_code == 403


def test_revoking_the_current_token_signs_it_out(clients, alice):
    answer = mint(clients["anonymous"])
    client = bearer(answer["token"])

    assert client.delete("/api/v1/tokens/current").status_code == 204
    assert client.get("/api/v1/me/").status_code == 401
