"""``GET/PUT me/notifications/``: a user's notification settings, their role's defaults, and bad
input answered with the stable JSON errors (all or nothing)."""

from __future__ import annotations

import pytest

from scheduler.notification_models import NotificationSettings
from tests.api.conftest import error_of
from tests.personas import token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/me/notifications/"
SECRET = "a-secret-of-twenty-chars"


def test_a_researcher_starts_with_nothing_chosen_and_may_choose_the_job_topics(alice):
    body = token_client(alice).get(URL).json()

    assert body["is_default"] is True
    assert body["email_events"] == [] and body["webhook_events"] == []
    assert body["choices"] == ["started", "finished", "failed", "preempted", "downgraded"]
    assert body["deliveries"] == []


def test_an_admin_hears_of_uplift_requests_by_email_until_they_choose_otherwise(ada):
    body = token_client(ada).get(URL).json()

    assert body["is_default"] is True
    assert body["email_events"] == ["uplift_requested"]
    assert "uplift_requested" in body["choices"]


def test_put_changes_only_the_fields_it_names_and_never_shows_the_secret(alice):
    client = token_client(alice)
    first = client.put(
        URL, {"webhook_url": "https://hooks.example.org/iris", "webhook_secret": SECRET}, format="json"
    ).json()
    second = client.put(URL, {"webhook_events": ["failed", "started", "failed"]}, format="json").json()

    assert first["webhook_secret_set"] is True and "webhook_secret" not in first
    assert second["webhook_url"] == "https://hooks.example.org/iris"
    assert second["webhook_events"] == ["started", "failed"]  # in the topics' order, once each
    assert second["is_default"] is False
    assert NotificationSettings.objects.get(user=alice).webhook_secret == SECRET
    assert SECRET not in str(client.get(URL).content)


def test_clearing_the_url_drops_the_secret(alice):
    client = token_client(alice)
    client.put(URL, {"webhook_url": "http://127.0.0.1:9/x", "webhook_secret": SECRET}, format="json")

    body = client.put(URL, {"webhook_url": ""}, format="json").json()

    assert body["webhook_url"] == "" and body["webhook_secret_set"] is False


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"email_events": ["begin"]}, "email_events", "unknown event 'begin'"),
        ({"email_events": "finished"}, "email_events", "expected a list"),
        ({"email_events": [3]}, "email_events", "expected a list"),
        ({"email_events": ["uplift_requested"]}, "email_events", "for admins only"),
        ({"webhook_events": ["failed"]}, "webhook_events", "choose a webhook_url"),
        ({"webhook_url": "ftp://example.org/x", "webhook_secret": SECRET}, "webhook_url", "http:// or https://"),
        ({"webhook_url": "https://", "webhook_secret": SECRET}, "webhook_url", "with a host"),
        ({"webhook_url": "https://a b/", "webhook_secret": SECRET}, "webhook_url", "spaces"),
        ({"webhook_url": "https://example.org:99999/", "webhook_secret": SECRET}, "webhook_url", "not a URL"),
        ({"webhook_url": "https://x.org/" + "a" * 2000, "webhook_secret": SECRET}, "webhook_url", "at most 2000"),
        ({"webhook_url": 7}, "webhook_url", "expected a string"),
        ({"webhook_url": "https://example.org/"}, "webhook_secret", "required with a webhook_url"),
        ({"webhook_url": "https://example.org/", "webhook_secret": "short"}, "webhook_secret", "16 to 200"),
        (
            {"webhook_url": "https://example.org/", "webhook_secret": "x" * 15 + " y"},
            "webhook_secret",
            "without spaces",
        ),
        ({"webhook_secret": SECRET}, "webhook_secret", "choose a webhook_url"),
        ({"email": "me@example.org"}, "email", "unknown field"),
    ],
)
def test_bad_settings_are_invalid_argument_naming_the_field_and_change_nothing(alice, body, field, words):
    client = token_client(alice)
    client.put(URL, {"email_events": ["finished"]}, format="json")

    response = client.put(URL, {"email_events": ["failed"], **body}, format="json")

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["details"]["field"] == field
    assert words in error["message"] and error["message"].startswith(f"{field}:")
    assert NotificationSettings.objects.get(user=alice).email_topics == ["finished"]


def test_a_body_that_is_not_an_object_is_invalid_argument(alice):
    response = token_client(alice).put(URL, [1, 2], format="json")

    assert response.status_code == 400 and error_of(response)["code"] == "INVALID_ARGUMENT"


def test_the_schema_describes_both_operations(alice):
    schema = token_client(alice).get("/api/schema/?format=json")
    paths = schema.json()["paths"]
    operations = paths["/api/v1/me/notifications/"]
    assert set(operations) >= {"get", "put"}
    assert operations["put"]["requestBody"]
