"""Delivering the outbox: signed webhooks to a real local receiver, email through Django's mail
framework, retries with exponential backoff, claims that are never taken twice, and a row
marked sent only after the receiver said 2xx."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from scheduler.events.record import Draft, record
from scheduler.events.sequence import sequence_events
from scheduler.models import Event
from scheduler.notification_models import NotificationDelivery
from scheduler.notifications.delivery import _mark_failed, backoff_seconds, claim_due, deliver_due, run_notifications
from scheduler.notifications.email import message_id
from scheduler.notifications.fanout import fan_out
from scheduler.notifications.payload import event_json
from scheduler.notifications.preferences import update_preferences
from scheduler.notifications.retention import prune_deliveries
from scheduler.notifications.webhook import signature, verify
from tests.notifications.receiver import Receiver
from tests.personas import token_client

pytestmark = pytest.mark.django_db
SECRET = "a-secret-of-twenty-chars"
State = NotificationDelivery.State


@pytest.fixture
def receiver():
    r = Receiver(secret=SECRET)
    yield r
    r.close()


def hook(user, url: str, *topics: str) -> None:
    update_preferences(user, {"webhook_url": url, "webhook_secret": SECRET, "webhook_events": list(topics)})


def failed_job(user="alice", job="/alice/train") -> None:
    record([Draft("finished", timezone.now(), user, job, data={"outcome": "failed"})])
    sequence_events()
    fan_out()


def row() -> NotificationDelivery:
    return NotificationDelivery.objects.get()


def later(seconds: float):
    moment = timezone.now() + timedelta(seconds=seconds)
    return lambda: moment


def test_a_webhook_gets_the_event_as_the_api_shows_it_signed_with_the_users_secret(alice, receiver):
    hook(alice, receiver.url, "failed")
    failed_job()

    done = deliver_due()

    assert done.sent == 1
    (got,) = receiver.received
    event = Event.objects.get(kind="finished")
    api = token_client(alice).get("/api/v1/events/?kind=finished").json()["events"]
    assert json.loads(got.body) == event_json(event) == api[0]
    assert got.valid and got.signature == signature(SECRET, int(got.timestamp), got.body)
    assert (got.key, got.user, got.topic) == (str(event.id), "alice", "failed")
    assert row().state == State.SENT and row().sent_at is not None and row().tries == 1


def test_a_signature_does_not_verify_with_another_secret_or_a_changed_body():
    body = b'{"id": 1}'
    header = signature(SECRET, 1700000000, body)

    assert verify(SECRET, "1700000000", body, header)
    assert not verify("another-secret-of-20", "1700000000", body, header)
    assert not verify(SECRET, "1700000000", b'{"id": 2}', header)
    assert not verify(SECRET, "1700000001", body, header)  # the timestamp is signed too
    assert not verify(SECRET, "soon", body, header)


def test_a_failed_try_is_retried_after_a_backoff_then_sent_with_the_same_key(alice, receiver, settings):
    settings.NOTIFY_RETRY_SECONDS = 10
    receiver.answers = [500]
    hook(alice, receiver.url, "failed")
    failed_job()

    first = deliver_due()
    retrying = row()
    too_soon = deliver_due(clock=later(5))
    second = deliver_due(clock=later(11))

    assert (first.retrying, too_soon.sent, second.sent) == (1, 0, 1)
    assert retrying.state == State.RETRYING and retrying.last_error == "HTTP 500"
    assert 9 <= (retrying.next_try_at - timezone.now()).total_seconds() <= 10
    assert [r.key for r in receiver.received] == [str(Event.objects.get().id)] * 2
    assert row().state == State.SENT and row().tries == 2


def test_backoff_doubles_per_try_up_to_an_hour(settings):
    settings.NOTIFY_RETRY_SECONDS = 10

    assert [backoff_seconds(n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert backoff_seconds(30) == 3600


def test_a_delivery_that_never_succeeds_fails_after_the_last_try(alice, receiver, settings):
    settings.NOTIFY_MAX_TRIES = 3
    receiver.answers = [503, 503, 503, 503]
    hook(alice, receiver.url, "failed")
    failed_job()

    for hours in range(3):
        deliver_due(clock=later(hours * 3600 + 1))

    assert row().state == State.FAILED and row().tries == 3 and row().last_error == "HTTP 503"
    assert deliver_due(clock=later(86400)).failed == 0
    assert len(receiver.received) == 3


def test_an_unreachable_or_redirecting_receiver_is_a_failed_try(alice, receiver):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    hook(alice, f"http://127.0.0.1:{port}/gone", "failed")
    failed_job()
    deliver_due()
    unreachable = row()
    hook(alice, receiver.url, "failed")
    receiver.answers = [302]
    deliver_due(clock=later(3600))

    assert unreachable.state == State.RETRYING and "could not reach the webhook" in unreachable.last_error
    assert row().state == State.RETRYING and row().last_error.startswith("HTTP 302")
    assert len(receiver.received) == 1  # the redirect was not followed


def test_a_claimed_row_is_not_claimed_again_until_its_claim_runs_out(alice):
    hook(alice, "http://127.0.0.1:9/x", "failed")
    failed_job()

    first = claim_due(timezone.now())
    again = claim_due(timezone.now() + timedelta(seconds=5))
    after = claim_due(timezone.now() + timedelta(seconds=120))

    assert len(first) == 1 and again == [] and len(after) == 1
    assert after[0].claim != first[0].claim and after[0].tries == 2


def test_a_deliverer_that_outlived_its_claim_cannot_mark_the_row(alice, receiver):
    """The first claimer's claim ran out and another claimed the row: the first one's outcome
    (here a failure) is not written over the second's."""
    hook(alice, receiver.url, "failed")
    failed_job()
    (stale,) = claim_due(timezone.now())
    (fresh,) = claim_due(timezone.now() + timedelta(seconds=120))

    _mark_failed(stale, timezone.now(), "late")

    assert row().state == State.SENDING and row().claim == fresh.claim


def test_receivers_are_sent_to_side_by_side_each_in_event_order(alice, bob, receiver, settings):
    settings.NOTIFY_CONCURRENCY = 4
    for user in (alice, bob):
        hook(user, receiver.url, "failed")
    for i in range(12):
        user = ("alice", "bob")[i % 2]
        record([Draft("finished", timezone.now(), user, f"/{user}/j{i}", data={"outcome": "failed"})])
    sequence_events()
    fan_out()

    done = deliver_due()

    assert done.sent == 12
    for user in ("alice", "bob"):
        ids = [r.event["id"] for r in receiver.received if r.user == user]
        assert len(ids) == 6 and ids == sorted(ids)
    assert set(NotificationDelivery.objects.values_list("state", "claim")) == {(State.SENT, "")}


def test_email_goes_through_djangos_mail_framework_once_per_delivery(alice):
    alice.email = "alice@example.org"
    alice.save()
    update_preferences(alice, {"email_events": ["failed"]})
    failed_job()

    run_notifications()

    (message,) = mail.outbox
    event = Event.objects.get()
    assert message.to == ["alice@example.org"]
    assert message.subject == "[Iris] /alice/train finished: failed"
    assert message.extra_headers["Message-ID"] == message_id(event.id, "alice")
    assert "/jobs/alice/train/" in message.body and "settings/notifications/" in message.body
    assert row().state == State.SENT


def test_an_address_removed_before_delivery_is_a_failed_try_shown_with_its_reason(alice):
    alice.email = "alice@example.org"
    alice.save()
    update_preferences(alice, {"email_events": ["failed"]})
    failed_job()
    alice.email = ""
    alice.save()

    deliver_due()

    assert mail.outbox == []
    assert row().state == State.RETRYING and row().last_error == "the account has no email address"


def test_the_api_shows_each_deliverys_state(alice, receiver, settings):
    settings.NOTIFY_CONCURRENCY = 1  # one after the other: the first request is the one answered 500
    receiver.answers = [500]
    hook(alice, receiver.url, "failed", "started")
    failed_job()
    failed_job(job="/alice/other")
    deliver_due()  # the first fails (500), the second is sent

    listed = token_client(alice).get("/api/v1/me/notifications/").json()["deliveries"]

    assert [(d["job"], d["state"], d["tries"]) for d in listed] == [
        ("/alice/other", "sent", 1),
        ("/alice/train", "retrying", 1),
    ]
    assert listed[1]["last_error"] == "HTTP 500" and listed[1]["next_try_at"]
    assert listed[0]["next_try_at"] is None and listed[0]["channel"] == "webhook"


def test_finished_deliveries_are_pruned_with_the_events_retention_and_open_ones_kept(alice):
    now = timezone.now()
    for event_id, state, age in [(1, "sent", 40), (2, "failed", 40), (3, "retrying", 40), (4, "sent", 5)]:
        NotificationDelivery.objects.create(
            event_id=event_id,
            channel="webhook",
            user="alice",
            topic="failed",
            kind="finished",
            body="{}",
            state=state,
            next_try_at=now,
            created_at=now - timedelta(days=age),
        )

    pruned = prune_deliveries(now, 30)

    assert pruned.deleted == 2
    assert sorted(NotificationDelivery.objects.values_list("event_id", flat=True)) == [3, 4]
    assert prune_deliveries(now, 0).deleted == 0
