"""The fan-out: events in the stream become one delivery per (event, channel, user) the user
chose, once however often it runs, in a fixed number of queries; uplift requests go to admins."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.budgets.writes import request_uplift
from scheduler.events.record import Draft, record
from scheduler.events.sequence import sequence_events
from scheduler.notification_models import NotificationCursor, NotificationDelivery
from scheduler.notifications.fanout import fan_out
from scheduler.notifications.preferences import update_preferences
from scheduler.notifications.topics import topic_of
from tests.personas import make_user

pytestmark = pytest.mark.django_db
SECRET = "a-secret-of-twenty-chars"


def events(*drafts: Draft) -> None:
    record(drafts)
    sequence_events()


def job_event(kind: str, user: str = "alice", job: str = "/alice/train", **data) -> Draft:
    return Draft(kind, timezone.now(), user, job, task_index=0, attempt=1, data=data)


def deliveries() -> list[tuple[str, str, str, str]]:
    return list(NotificationDelivery.objects.order_by("id").values_list("kind", "topic", "channel", "user"))


@pytest.fixture
def alice_listens(alice):
    alice.email = "alice@example.org"
    alice.save()
    update_preferences(
        alice,
        {
            "email_events": ["finished", "failed"],
            "webhook_events": ["started", "preempted", "downgraded", "failed"],
            "webhook_url": "http://127.0.0.1:9/hook",
            "webhook_secret": SECRET,
        },
    )
    return alice


@pytest.mark.parametrize(
    ("kind", "data", "topic"),
    [
        ("finished", {"outcome": "succeeded"}, "finished"),
        ("finished", {"outcome": "failed"}, "failed"),
        ("finished", {"outcome": "lost"}, "failed"),
        ("finished", {"outcome": "unschedulable"}, "failed"),
        ("started", {}, "started"),
        ("preempted", {}, "preempted"),
        ("downgraded", {}, "downgraded"),
        ("uplift_requested", {}, "uplift_requested"),
        ("queued", {}, None),
        ("running", {}, None),
        ("cancelled", {}, None),
        ("submitted", {}, None),
    ],
)
def test_each_event_kind_is_one_topic_or_none(kind, data, topic):
    assert topic_of(kind, data) == topic


def test_each_chosen_topic_makes_one_delivery_per_channel(alice_listens):
    events(
        job_event("submitted"),
        job_event("started", worker="w1"),
        job_event("preempted"),
        job_event("finished", outcome="failed"),
        job_event("finished", job="/alice/ok", outcome="succeeded"),
    )

    made = fan_out()

    assert made == 5
    assert deliveries() == [
        ("started", "started", "webhook", "alice"),
        ("preempted", "preempted", "webhook", "alice"),
        ("finished", "failed", "email", "alice"),
        ("finished", "failed", "webhook", "alice"),
        ("finished", "finished", "email", "alice"),
    ]


def test_a_second_run_makes_nothing_again_and_reads_only_new_events(alice_listens):
    events(job_event("started", worker="w1"))
    fan_out()
    assert fan_out() == 0
    events(job_event("preempted"))

    assert fan_out() == 1
    assert len(deliveries()) == 2


def test_a_run_over_events_already_fanned_out_inserts_nothing_twice(alice_listens):
    """Delivery rows are unique on (event, channel, user): a watermark set back (or two
    fan-outs over the same events) cannot double a notification."""
    events(job_event("started", worker="w1"), job_event("finished", outcome="failed"))
    fan_out()
    NotificationCursor.objects.update(last_event_id=0)

    fan_out()

    assert len(deliveries()) == 3
    assert NotificationCursor.objects.get().last_event_id > 0


def test_nobody_is_told_of_another_users_job(alice_listens, bob):
    update_preferences(bob, {"webhook_url": "http://127.0.0.1:9/b", "webhook_secret": SECRET})
    update_preferences(bob, {"webhook_events": ["started", "failed"]})
    events(job_event("started", worker="w1"), job_event("started", user="bob", job="/bob/x"))

    fan_out()

    assert sorted((u, k) for k, _, _, u in deliveries()) == [("alice", "started"), ("bob", "started")]


def test_no_email_address_no_email_delivery(alice):
    update_preferences(alice, {"email_events": ["failed"]})
    events(job_event("finished", outcome="failed"))

    fan_out()

    assert deliveries() == []


def test_an_uplift_request_notifies_every_admin_by_default_and_no_researcher(alice_listens, ada, bob):
    ada.email = "ada@example.org"
    ada.save()
    root = make_user("root")
    root.is_superuser, root.email = True, "root@example.org"
    root.save()
    quiet = make_user("quiet", role="admin")
    quiet.email = "quiet@example.org"
    quiet.save()
    update_preferences(quiet, {"email_events": []})

    request_uplift(alice_listens, budget_limit=500, reason="deadline", duration_seconds=3600)
    sequence_events()
    fan_out()

    assert deliveries() == [
        ("uplift_requested", "uplift_requested", "email", "ada"),
        ("uplift_requested", "uplift_requested", "email", "root"),
    ]


def test_fan_out_queries_do_not_grow_with_the_events(alice_listens, bob, django_assert_max_num_queries):
    update_preferences(bob, {"webhook_url": "http://127.0.0.1:9/b", "webhook_secret": SECRET})
    update_preferences(bob, {"webhook_events": ["started"]})
    events(*(job_event("started", user=u, job=f"/{u}/j{i}", worker="w1") for i in range(40) for u in ("alice", "bob")))

    with django_assert_max_num_queries(12):
        made = fan_out()

    assert made == 80
