"""``iris job wait`` (an exit status per end state) and ``iris job watch`` against a live
server (issue 27)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus
from scheduler.execution.attempts import apply_reports
from scheduler.jobs.cancel import cancel_job
from scheduler.models import Job
from scheduler.notifications.delivery import run_notifications
from scheduler.notifications.preferences import update_preferences
from scheduler.notifications.topics import JOB_TOPICS, topic_of
from scheduler.tick.run import run_tick
from tests.events.test_job_events import drive_alice_train
from tests.notifications.receiver import Receiver
from tests.personas import make_job, make_worker, submit, token_client


@pytest.fixture(autouse=True)
def quick_polls(settings):
    settings.EVENTS_POLL_SECONDS = 0.05
    settings.EVENTS_HEARTBEAT_SECONDS = 0.2  # a stream the CLI has left ends at a heartbeat or two
    yield
    # The live server's streams the CLI left end once a heartbeat finds them closed: wait for
    # them, so that none starts the event waker again after the test's has been stopped (its
    # connection would keep the test database from being dropped).
    deadline = time.monotonic() + 10
    while any("process_request_thread" in t.name for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)


def started_job(alice, name: str, **spec) -> Job:
    """alice's job ``name`` with its one task started on w1."""
    make_worker("w1")
    job = submit(alice, name, **spec)
    run_tick()
    return job


def end(job: Job, status: AttemptStatus, **fields) -> None:
    task = job.tasks.get()
    apply_reports([AttemptReport(AttemptRef(task.pk, task.attempt_count), status, worker="w1", **fields)])


@pytest.fixture
def alice(iris, personas):
    """The persona, with the CLI signed in as her."""
    iris.use_token("alice")
    return personas["alice"]


@pytest.mark.parametrize(
    ("ending", "code", "text"),
    [
        ((AttemptStatus.SUCCEEDED, {"exit_code": 0}), 0, "/alice/j succeeded"),
        ((AttemptStatus.FAILED, {"exit_code": 3}), 3, "/alice/j failed"),
        ((AttemptStatus.FAILED, {"exit_code": -9}), 4, "/alice/j killed"),
        ((AttemptStatus.WORKER_LOST, {}), 5, "/alice/j lost"),
    ],
    ids=["succeeded", "failed", "killed", "lost"],
)
def test_wait_exits_with_the_status_of_how_the_job_ended(iris, alice, ending, code, text):
    job = started_job(alice, "j", max_retries_preemption=0)
    status, fields = ending
    end(job, status, **fields)

    result = iris("job", "wait", "/alice/j")

    assert (result.code, result.out.strip()) == (code, text), result.err


def test_wait_for_a_cancelled_job_exits_6(iris, alice):
    started_job(alice, "j")
    cancel_job(alice, "/alice/j")

    result = iris("job", "wait", "/alice/j")

    assert (result.code, result.out.strip()) == (6, "/alice/j cancelled by alice")


def test_wait_for_a_job_past_its_scheduling_deadline_exits_8(iris, alice):
    make_job("/alice/late", deadline_ms=1)
    run_tick()

    assert iris("job", "wait", "/alice/late").code == 8


def test_wait_blocks_until_the_job_ends(iris, alice):
    job = started_job(alice, "j")
    timer = threading.Timer(0.5, end, (job, AttemptStatus.SUCCEEDED), {"exit_code": 0})
    timer.start()
    try:
        result = iris("job", "wait", "/alice/j", "--timeout", "30s")
    finally:
        timer.join()

    assert result.code == 0, result.err


def test_wait_gives_up_after_its_timeout_with_124(iris, alice):
    started_job(alice, "j")

    result = iris("job", "wait", "/alice/j", "--timeout", "1")

    assert result.code == 124
    assert "had not finished after 1 s" in result.err


def test_wait_for_a_job_that_does_not_exist_is_an_error(iris, alice):
    result = iris("job", "wait", "/alice/nothing")

    assert result.code == 1 and "NOT_FOUND" in result.err


def test_watch_json_and_a_webhook_get_the_same_events_as_the_api_each_once(iris, alice, personas):
    receiver = Receiver(secret="s3cret-of-alice-0123")
    update_preferences(
        alice, {"webhook_url": receiver.url, "webhook_secret": receiver.secret, "webhook_events": list(JOB_TOPICS)}
    )
    try:
        drive_alice_train(alice, personas["ada"])
        run_notifications()
    finally:
        receiver.close()

    watched = iris("job", "watch", "/alice/train", "--json")
    api = token_client(alice).get("/api/v1/events/?job=alice/train&limit=1000").json()["events"]

    # The webhook: the API's events of the topics alice chose, in order, each once, each signed.
    train = [r for r in receiver.received if r.event["job"] == "/alice/train"]
    hooked = [r.event for r in train]
    assert hooked == [e for e in api if topic_of(e["kind"], e["data"]) is not None]
    assert [e["kind"] for e in hooked] == ["downgraded", "started", "preempted", "downgraded", "started"]
    assert [r.key for r in train] == [str(e["id"]) for e in hooked]
    assert all(r.valid for r in receiver.received)
    assert len({r.key for r in receiver.received}) == len(receiver.received)
    # Her other job's end is hers too (and ada's job is not): nothing else was sent.
    others = [(r.event["job"], r.topic) for r in receiver.received if r not in train]
    assert others == [("/alice/big", "finished")]

    assert watched.code == 0, watched.err
    lines = [json.loads(line) for line in watched.out.splitlines()]
    assert lines == api
    assert len({e["id"] for e in lines}) == len(lines)
    assert [e["kind"] for e in lines][-1] == "cancelled"
    assert {"preempted", "downgraded", "cancelled", "started", "queued"} <= {e["kind"] for e in lines}


def test_watch_prints_one_line_per_event(iris, alice):
    job = started_job(alice, "j")
    end(job, AttemptStatus.FAILED, exit_code=2)

    result = iris("job", "watch", "alice/j")

    lines = result.out.splitlines()
    assert result.code == 0, result.err
    assert [line.split()[3] for line in lines] == ["submitted", "started", "task_finished", "finished"]
    assert lines[1].endswith("on w1 (attempt 1, interactive)")
    assert lines[2].endswith("failed: exited with code 2")


def test_watch_needs_a_job_or_a_user(iris, alice):
    result = iris("job", "watch")

    assert result.code == 1 and "give a job id or --user U" in result.err


def test_watch_follows_across_streams_the_server_ends_each_event_once(iris, alice, settings, monkeypatch):
    """Streams of one second: the job ends after three, so the watch reconnects (``Last-Event-ID``)
    at least twice; its lines are the API's events of the job, each once, in order."""
    from iris_cli.client import Session

    settings.EVENTS_STREAM_SECONDS = 1
    resumed_from = []
    real_stream = Session.stream

    def stream(self, path, last_event_id=None, **query):
        resumed_from.append(last_event_id)
        return real_stream(self, path, last_event_id, **query)

    monkeypatch.setattr(Session, "stream", stream)
    job = started_job(alice, "j")
    timer = threading.Timer(3, end, (job, AttemptStatus.SUCCEEDED), {"exit_code": 0})
    timer.start()
    try:
        watched = iris("job", "watch", "/alice/j", "--json")
    finally:
        timer.join()

    api = token_client(alice).get("/api/v1/events/?job=alice/j&limit=1000").json()["events"]
    assert watched.code == 0, watched.err
    assert [json.loads(line) for line in watched.out.splitlines()] == api
    assert [e["kind"] for e in api][-2:] == ["task_finished", "finished"]
    assert len(resumed_from) >= 3 and resumed_from[0] is None and all(resumed_from[1:])
