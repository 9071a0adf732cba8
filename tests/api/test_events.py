"""``GET /api/v1/events/``: filters, resuming (``since`` and ``Last-Event-ID``), the long poll's
bound, who sees which events, and stable errors for bad query strings."""

from __future__ import annotations

import pytest

from tests.api.conftest import error_of
from tests.personas import submit

pytestmark = pytest.mark.django_db


def test_events_are_listed_oldest_first_with_their_fields(as_alice, event_history):
    page = as_alice.get("/api/v1/events/").json()

    assert [(e["kind"], e["job"], e["task"]) for e in page["events"]] == [
        ("submitted", "/alice/train", None),
        ("submitted", "/bob/eval", None),
        ("started", "/alice/train", "/alice/train/0"),
        ("started", "/bob/eval", "/bob/eval/0"),
        ("uplift_requested", None, None),
    ]
    started = page["events"][2]
    assert set(started) == {"id", "kind", "at", "user", "job", "task", "attempt", "tick", "data"}
    assert (started["user"], started["attempt"], started["data"]["worker"]) == ("alice", 1, "w1")
    assert page["next"] == page["events"][-1]["id"] and page["more"] is False


def test_filters_by_job_user_and_kind(as_alice, event_history):
    def jobs_of(query):
        return [(e["kind"], e["job"]) for e in as_alice.get(f"/api/v1/events/?{query}").json()["events"]]

    assert jobs_of("job=bob/eval") == [("submitted", "/bob/eval"), ("started", "/bob/eval")]
    assert jobs_of("user=bob") == [("submitted", "/bob/eval"), ("started", "/bob/eval")]
    assert jobs_of("kind=started,uplift_requested") == [
        ("started", "/alice/train"),
        ("started", "/bob/eval"),
        ("uplift_requested", None),
    ]


def test_a_read_resumes_after_since_or_the_last_event_id_header(as_alice, event_history):
    first = as_alice.get("/api/v1/events/?limit=2").json()
    assert first["more"] is True and len(first["events"]) == 2

    by_param = as_alice.get(f"/api/v1/events/?since={first['next']}").json()
    by_header = as_alice.get("/api/v1/events/", HTTP_LAST_EVENT_ID=str(first["next"])).json()

    assert [e["id"] for e in by_param["events"]] == [e["id"] for e in by_header["events"]]
    assert [e["kind"] for e in by_param["events"]] == ["started", "started", "uplift_requested"]
    # since= wins over the header
    assert as_alice.get("/api/v1/events/?since=0", HTTP_LAST_EVENT_ID="999").json()["events"][0]["kind"] == "submitted"


def test_since_now_starts_after_the_newest_event(as_alice, alice, event_history, settings):
    page = as_alice.get("/api/v1/events/?since=now").json()
    assert page["events"] == [] and page["next"] > 0

    submit(alice, "later")

    assert [e["job"] for e in as_alice.get(f"/api/v1/events/?since={page['next']}").json()["events"]] == [
        "/alice/later"
    ]


def test_another_researchers_budget_events_are_not_shown_but_their_job_events_are(as_bob, as_olivia, event_history):
    bobs_view = [e["kind"] for e in as_bob.get("/api/v1/events/?user=alice").json()["events"]]
    operators_view = [e["kind"] for e in as_olivia.get("/api/v1/events/?user=alice").json()["events"]]

    assert bobs_view == ["submitted", "started"]
    assert operators_view == ["submitted", "started", "uplift_requested"]


def test_a_wait_with_nothing_new_returns_empty_after_the_wait(as_alice, event_history, settings):
    settings.EVENTS_POLL_SECONDS = 0.05
    newest = as_alice.get("/api/v1/events/?since=now").json()["next"]

    page = as_alice.get(f"/api/v1/events/?since={newest}&wait=1").json()

    assert page == {"events": [], "next": newest, "more": False}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=-1", "since"),
        ("since=abc", "since"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("wait=26", "wait"),
        ("wait=x", "wait"),
        ("kind=nonsense", "kind"),
        ("job=nojob", "job"),
        ("job=/alice/a b", "job"),
        ("user=a:b", "user"),
    ],
)
def test_bad_query_values_are_invalid_argument_naming_the_field(as_alice, query, field):
    response = as_alice.get(f"/api/v1/events/?{query}")

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "INVALID_ARGUMENT" and error["details"]["field"] == field


def test_a_bad_last_event_id_names_the_header(as_alice):
    response = as_alice.get("/api/v1/events/", HTTP_LAST_EVENT_ID="soon")

    assert response.status_code == 400 and error_of(response)["details"]["field"] == "Last-Event-ID"


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_the_plain_page_is_the_serializers_page_byte_for_byte(alice, olivia, event_history, zone):
    """``event_page_json`` (what ``GET events/`` answers) against ``EventPageSerializer`` (its
    schema), over job, task and budget events, in UTC ("Z") and another current time zone, and
    again from the dicts kept on the events."""
    import json

    from django.utils import timezone

    from scheduler.api.serializers.events import EventPageSerializer, event_page_json
    from scheduler.events.stream import EventQuery, read_events

    with timezone.override(zone):
        page = read_events(olivia, EventQuery(limit=1000))
        assert {e.kind for e in page.events} >= {"submitted", "started", "uplift_requested"}

        expected = json.dumps(EventPageSerializer(page).data)
        assert json.dumps(event_page_json(page)) == expected
        assert json.dumps(event_page_json(page)) == expected  # the kept dicts
        assert ("Z" if zone == "UTC" else "-0") in event_page_json(page)["events"][0]["at"][-6:]
    # Back in UTC, the kept dicts of another zone are not served: the answer is in UTC again.
    assert event_page_json(page)["events"][0]["at"].endswith("Z")
    assert json.dumps(event_page_json(page)) == json.dumps(EventPageSerializer(page).data)


def test_every_answer_gives_its_database_slot_back(as_alice, client, monkeypatch):
    """A refused token (401), a bad query (400) and a page (200) each hold one of the process's
    stream slots while they run and give it back."""
    from scheduler.events import wake

    slots = wake.DatabaseSlots(1)
    monkeypatch.setattr(wake, "_SLOTS", slots)

    free = []
    for answer in (
        lambda: client.get("/api/v1/events/", HTTP_AUTHORIZATION="Token nonsense"),
        lambda: as_alice.get("/api/v1/events/?since=abc"),
        lambda: as_alice.get("/api/v1/events/"),
    ):
        status = answer().status_code
        free.append((status, slots._semaphore._value))  # checked before the next could block

    assert free == [(401, 1), (400, 1), (200, 1)]


def test_the_stream_checks_a_repeat_token_once_in_its_window_and_again_after_it(alice, monkeypatch):
    """A watcher's token is looked up once per ``TOKEN_CHECK_SECONDS`` in a process; a token
    deleted meanwhile is refused once the window has passed; a refusal is never remembered."""
    from scheduler.api import authentication
    from scheduler.models import ApiToken
    from tests.personas import token_client

    monkeypatch.setattr(authentication.RepeatTokenAuthentication, "_checked", {})
    clock = [1000.0]
    monkeypatch.setattr(authentication, "monotonic", lambda: clock[0])
    lookups = []
    real_lookup = authentication.tokens_with_key
    monkeypatch.setattr(authentication, "tokens_with_key", lambda key: lookups.append(key) or real_lookup(key))
    client = token_client(alice)

    assert [client.get("/api/v1/events/").status_code for _ in range(3)] == [200, 200, 200]
    assert len(lookups) == 1

    ApiToken.objects.filter(user=alice).delete()
    clock[0] += authentication.TOKEN_CHECK_SECONDS - 1
    assert client.get("/api/v1/events/").status_code == 200  # still inside the window
    clock[0] += 1
    assert [client.get("/api/v1/events/").status_code for _ in range(2)] == [401, 401]
    assert len(lookups) == 3


def test_the_stream_refuses_a_remembered_token_once_it_has_expired(alice, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.api import authentication
    from tests.personas import token_client

    monkeypatch.setattr(authentication.RepeatTokenAuthentication, "_checked", {})
    client = token_client(alice)
    assert client.get("/api/v1/events/").status_code == 200

    later = timezone.now() + timedelta(days=3650)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert client.get("/api/v1/events/").status_code == 401


def test_a_streams_frames_are_written_once_per_event_and_zone_and_equal_a_fresh_render(
    olivia, event_history, monkeypatch
):
    """``event_frames`` keeps each event's frame on the event, as ``event_json`` keeps its dict:
    a second stream woken with the same events writes the same text without encoding them again,
    and a stream in another time zone gets its own."""
    import json

    from django.utils import timezone

    from scheduler.api.serializers import events as serializers
    from scheduler.events.stream import EventQuery, read_events

    def fresh(zone):
        page = read_events(olivia, EventQuery(limit=1000))
        return "".join(
            f"id: {e.id}\ndata: {json.dumps(serializers.event_json(e, zone), ensure_ascii=False, separators=(',', ':'))}\n\n"
            for e in page.events
        )

    page = read_events(olivia, EventQuery(limit=1000))
    encoded = []
    real_dumps = json.dumps
    monkeypatch.setattr(serializers.json, "dumps", lambda *a, **k: encoded.append(1) or real_dumps(*a, **k))
    utc = serializers.current_zone()
    with timezone.override("America/New_York"):
        new_york = serializers.current_zone()

    first = serializers.event_frames(page, utc)
    again = serializers.event_frames(page, utc)
    assert len(encoded) == len(page.events) >= 5  # the second stream encoded nothing
    elsewhere = serializers.event_frames(page, new_york)
    assert len(encoded) == 2 * len(page.events)
    monkeypatch.setattr(serializers.json, "dumps", real_dumps)

    assert first == again == fresh(utc)
    assert elsewhere == fresh(new_york) != first
