"""What a notification email says, per topic (plain functions over the event's JSON)."""

from __future__ import annotations

import pytest

from scheduler.notifications.email import message_id, subject_and_text


@pytest.mark.parametrize(
    ("topic", "event", "subject"),
    [
        (
            "started",
            {"job": "/a/b", "task": "/a/b/0", "attempt": 2, "data": {"worker": "w1", "band": "interactive"}},
            "[Iris] /a/b/0 started on w1 (attempt 2, interactive)",
        ),
        (
            "preempted",
            {"job": "/a/b", "task": "/a/b/1", "data": {"by": "/ada/p/0", "by_user": "ada", "by_band": "production"}},
            "[Iris] /a/b/1 was preempted by /ada/p/0 (ada, production); it is requeued",
        ),
        (
            "downgraded",
            {"job": "/a/b", "data": {"from_band": "interactive", "to_band": "batch"}},
            "[Iris] /a/b now queues as BATCH (was INTERACTIVE): its user is over the budget limit",
        ),
        ("finished", {"job": "/a/b", "data": {"outcome": "succeeded"}}, "[Iris] /a/b finished: succeeded"),
        ("failed", {"job": "/a/b", "data": {"outcome": "lost"}}, "[Iris] /a/b finished: lost"),
        (
            "uplift_requested",
            {"user": "bob", "data": {"uplift": 7, "budget_limit": 500, "max_band": None, "duration_seconds": 5400}},
            "[Iris] bob requests uplift 7: limit 500 for 1.5 h",
        ),
        (
            "uplift_requested",
            {
                "user": "bob",
                "data": {"uplift": 8, "budget_limit": None, "max_band": "interactive", "duration_seconds": 3600},
            },
            "[Iris] bob requests uplift 8: max band INTERACTIVE for 1 h",
        ),
    ],
)
def test_each_topic_has_a_subject_that_says_what_happened(topic, event, subject, settings):
    settings.CONSOLE_URL = "https://iris.example.org/"
    got, text = subject_and_text(topic, {"id": 1, "at": "2026-12-04T19:00:00Z", **event})

    assert got == subject
    assert text.startswith(subject.removeprefix("[Iris] ") + ".")
    assert "https://iris.example.org/settings/notifications/" in text


def test_a_message_id_is_the_same_for_every_try_and_safe_for_any_user_name():
    assert message_id(5, "a@b+c") == message_id(5, "a@b+c") != message_id(5, "other")
    assert message_id(5, "a@b+c").count("@") == 1
