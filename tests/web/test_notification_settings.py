"""The console's notification settings page: linked from the nav, an HTMX form with CSRF that
saves through the same rules as the API, and each notification's delivery state."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from scheduler.notification_models import NotificationDelivery, NotificationSettings
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
URL = "/settings/notifications/"


def test_the_nav_links_to_the_page(clients):
    assert f'href="{URL}"' in clients["alice"].get("/queue/").content.decode()


def test_a_researcher_sees_the_job_topics_and_an_admin_also_uplift_requests(clients):
    mine = clients["alice"].get(URL).content.decode()
    admins = clients["ada"].get(URL).content.decode()

    assert 'value="failed"' in mine and 'value="uplift_requested"' not in mine
    assert 'value="uplift_requested"' in admins
    assert "no email address" in mine  # personas have none


def test_saving_with_htmx_answers_the_section_and_writes_the_settings(clients, alice):
    response = clients["alice"].post(
        URL,
        {
            "email_events": ["finished", "failed"],
            "webhook_events": ["started"],
            "webhook_url": "https://hooks.example.org/a",
            "webhook_secret": "a-secret-of-twenty-chars",
        },
        **HTMX,
    )

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section class="card" id="notification-settings"') and "Saved." in html
    row = NotificationSettings.objects.get(user=alice)
    assert (row.email_topics, row.webhook_topics, row.webhook_url) == (
        ["finished", "failed"],
        ["started"],
        "https://hooks.example.org/a",
    )
    assert "a-secret-of-twenty-chars" not in html


def test_a_bad_value_is_shown_on_its_field_and_nothing_is_saved(clients, alice):
    response = clients["alice"].post(
        URL, {"webhook_url": "ftp://x.org/", "webhook_secret": "a-secret-of-twenty-chars"}, **HTMX
    )

    assert response.status_code == 400
    assert "expected an http:// or https:// URL with a host" in response.content.decode()
    assert not NotificationSettings.objects.filter(user=alice).exists()


def test_a_post_without_the_csrf_token_is_refused(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    response = client.post(URL, {"email_events": ["failed"]})

    assert response.status_code == 403
    assert not NotificationSettings.objects.filter(user=alice).exists()


def test_a_plain_post_redirects_back_with_a_message(alice):
    client = client_for(alice)

    response = client.post(URL, {"email_events": ["failed"]}, follow=True)

    assert response.redirect_chain == [(URL, 302)]
    assert "Notification settings saved." in response.content.decode()


def test_each_notification_shows_its_delivery_state(clients):
    now = timezone.now()
    for event_id, state, error in [(1, "sent", ""), (2, "retrying", "HTTP 500"), (3, "failed", "HTTP 410: gone")]:
        NotificationDelivery.objects.create(
            event_id=event_id,
            channel="webhook",
            user="alice",
            topic="failed",
            kind="finished",
            job="/alice/train",
            body="{}",
            state=state,
            tries=1,
            next_try_at=now,
            created_at=now,
            sent_at=now if state == "sent" else None,
            last_error=error,
        )

    section = clients["alice"].get(URL + "?part=deliveries", **HTMX).content.decode()
    others = clients["bob"].get(URL).content.decode()

    assert section.lstrip().startswith('<section class="card" id="deliveries"')
    for state in ("sent", "retrying", "failed"):
        assert f'delivery-{state}">{state}</span>' in section
    assert "HTTP 500" in section and "HTTP 410: gone" in section
    assert "delivery-sent" not in others  # bob sees his own notifications only
