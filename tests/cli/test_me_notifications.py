"""``iris me notifications`` against a live server: shows and changes what you are told of."""

from __future__ import annotations

import re

import pytest

from scheduler.notification_models import NotificationSettings


@pytest.fixture
def alice(iris, personas):
    iris.use_token("alice")
    return personas["alice"]


def test_it_shows_the_defaults_and_the_choices(iris, alice):
    result = iris("me", "notifications")

    assert result.code == 0, result.err
    assert re.search(r"^by email +\(nothing\)$", result.out, re.M)
    assert "started, finished, failed, preempted, downgraded" in result.out
    assert "No notifications yet." in result.out


def test_options_change_only_what_they_name(iris, alice, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("a-secret-of-twenty-chars\n")

    first = iris("me", "notifications", "--email", "finished,failed")
    second = iris(
        "me",
        "notifications",
        "--webhook-url",
        "https://hooks.example.org/a",
        "--webhook-secret-file",
        str(secret),
        "--webhook",
        "started",
    )

    assert first.code == 0 and second.code == 0, second.err
    row = NotificationSettings.objects.get(user=alice)
    assert (row.email_topics, row.webhook_topics, row.webhook_secret) == (
        ["finished", "failed"],
        ["started"],
        "a-secret-of-twenty-chars",
    )
    assert re.search(r"^secret +set$", second.out, re.M)


def test_a_bad_choice_is_the_servers_error_naming_the_field(iris, alice):
    result = iris("me", "notifications", "--email", "uplift_requested")

    assert result.code == 1
    assert "INVALID_ARGUMENT" in result.err and "email_events" in result.err and "admins only" in result.err
