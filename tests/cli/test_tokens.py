"""`iris login` mints a token per login, `iris logout` revokes it on the server (issue 13, §6)."""

from __future__ import annotations

import json

from scheduler.models import ApiToken


def saved_token(home) -> str:
    return json.loads((home / ".config" / "iris" / "credentials.json").read_text())["token"]


def test_logout_revokes_the_saved_token_on_the_server(iris, home):
    iris.login("alice")
    token = saved_token(home)
    iris.monkeypatch.setenv("IRIS_SERVER", iris.server)

    result = iris("logout")

    assert result.code == 0 and "Revoked the token" in result.out
    assert not (home / ".config" / "iris" / "credentials.json").exists()
    assert not ApiToken.objects.filter(token_key=token[:15]).exists()
    iris.monkeypatch.setenv("IRIS_TOKEN", token)
    after = iris("whoami")
    assert after.code == 1 and after.err.startswith("UNAUTHENTICATED")


def test_each_login_is_its_own_token_named_for_the_machine_and_listed(iris, home):
    iris.login("alice")
    first = saved_token(home)
    iris.login("alice")
    second = saved_token(home)

    listed = iris("--json", "token", "list").json()

    assert first != second
    assert len(listed) == 2 and all(row["name"].startswith("iris CLI on ") for row in listed)
    assert [row["id"] for row in listed if row["current"]] == [second[:15]]
    assert iris("token", "revoke", first[:15]).code == 0
    assert [row["id"] for row in iris("--json", "token", "list").json()] == [second[:15]]
