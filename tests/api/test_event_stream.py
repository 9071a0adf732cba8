"""``GET /api/v1/events/`` as server-sent events (``Accept: text/event-stream``): each event once,
in order, as the long poll's pages list them; resumed from ``Last-Event-ID`` without a gap or a
repeat; the same visibility; the end after ``IRIS_EVENTS_STREAM_SECONDS``; errors are the JSON
errors, not a stream. The waker's path (outside a test's transaction) is in
tests/events/test_waking.py."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import error_of
from tests.personas import submit

pytestmark = pytest.mark.django_db

STREAM = {"HTTP_ACCEPT": "text/event-stream"}


@pytest.fixture(autouse=True)
def _short_streams(settings):
    settings.EVENTS_STREAM_SECONDS = 1
    settings.EVENTS_HEARTBEAT_SECONDS = 0.2
    settings.EVENTS_POLL_SECONDS = 0.05


def frames(chunks) -> list[dict]:
    """The frames of a stream's text, each as its fields (``data`` decoded; a comment as
    ``{"comment": ...}``), in order."""
    text = b"".join(chunks).decode()
    assert text.endswith("\n\n")
    parsed = []
    for block in text[:-2].split("\n\n"):
        frame: dict = {}
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            frame[field or "comment"] = value.removeprefix(" ")
        if "data" in frame:
            frame["data"] = json.loads(frame["data"])
        parsed.append(frame)
    return parsed


def events_of(parsed: list[dict]) -> list[dict]:
    return [frame["data"] for frame in parsed if "data" in frame]


def test_a_stream_sends_every_event_once_in_order_as_the_page_lists_them_then_ends(as_alice, event_history):
    page = as_alice.get("/api/v1/events/?limit=1000").json()

    response = as_alice.get("/api/v1/events/?limit=2", **STREAM)  # read two at a time
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    parsed = frames(response.streaming_content)  # returns: the stream ended after its second

    assert parsed[0] == {"retry": "1000", "id": "0"}
    assert events_of(parsed) == page["events"]
    assert [frame["id"] for frame in parsed if "data" in frame] == [str(e["id"]) for e in page["events"]]
    assert parsed[-1] == {"comment": "keep-alive"}  # nothing more came: heartbeats until the end


def test_an_event_written_while_the_stream_runs_arrives_on_it(as_alice, alice, event_history):
    response = as_alice.get("/api/v1/events/?since=now&user=alice", **STREAM)
    chunks = iter(response.streaming_content)
    start = frames([next(chunks)])[0]

    submit(alice, "later")
    rest = frames(chunks)

    newest = as_alice.get("/api/v1/events/?since=now").json()["next"]
    assert start["id"] == str(newest - 1)  # "now" was fixed when the stream began
    assert [(e["kind"], e["job"]) for e in events_of(rest)] == [("submitted", "/alice/later")]


def test_a_stream_resumes_after_its_last_event_id_without_a_gap_or_a_repeat(as_alice, event_history):
    whole = events_of(frames(as_alice.get("/api/v1/events/", **STREAM).streaming_content))
    cut = whole[1]["id"]

    resumed = as_alice.get("/api/v1/events/", HTTP_LAST_EVENT_ID=str(cut), **STREAM)
    parsed = frames(resumed.streaming_content)

    assert parsed[0]["id"] == str(cut)
    assert whole[:2] + events_of(parsed) == whole


def test_a_stream_shows_what_the_long_poll_shows_to_each_role(as_bob, as_olivia, event_history):
    def kinds(client):
        return [
            e["kind"] for e in events_of(frames(client.get("/api/v1/events/?user=alice", **STREAM).streaming_content))
        ]

    assert kinds(as_bob) == ["submitted", "started"]  # alice's uplift request is hers
    assert kinds(as_olivia) == ["submitted", "started", "uplift_requested"]


@pytest.mark.parametrize(("query", "field"), [("kind=nonsense", "kind"), ("job=nojob", "job"), ("since=x", "since")])
def test_a_bad_filter_is_the_json_error_not_a_stream(as_alice, query, field):
    response = as_alice.get(f"/api/v1/events/?{query}", **STREAM)

    assert response.status_code == 400 and not response.streaming
    assert response["Content-Type"] == "application/json"
    error = error_of(response)
    assert error["code"] == "INVALID_ARGUMENT" and error["details"]["field"] == field


def test_a_stream_without_a_valid_token_is_the_json_401(client):
    response = client.get("/api/v1/events/", HTTP_AUTHORIZATION="Token nonsense", **STREAM)

    assert response.status_code == 401 and not response.streaming
    assert response["Content-Type"] == "application/json"


def test_a_stream_holds_no_database_slot_between_its_pages(as_alice, event_history, monkeypatch):
    from scheduler.events import wake

    slots = wake.DatabaseSlots(1)
    monkeypatch.setattr(wake, "_SLOTS", slots)
    response = as_alice.get("/api/v1/events/?limit=2", **STREAM)

    free = []
    for _ in response.streaming_content:
        free.append(slots._semaphore._value)  # while the frame is written out

    assert free and set(free) == {1}
