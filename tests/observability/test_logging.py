"""Logs: JSON lines that parse and carry their fields, chatter at DEBUG, and who did each write."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from django.conf import settings

from scheduler.budgets.writes import approve_uplift, request_uplift, set_budget
from scheduler.execution.workers import drain_worker
from scheduler.jobs.cancel import cancel_job
from scheduler.observability.logging import AGENT_EXITED, AGENT_STARTED, AGENT_STOPPING, DemoteChatter, JsonFormatter
from tests.personas import make_worker, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def json_lines():
    """Records of the ``scheduler`` loggers, formatted as ``IRIS_LOG_FORMAT=json`` does, parsed."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("scheduler")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_a_submission_and_a_tick_log_json_with_their_fields(alice, json_lines, tick):
    make_worker("w1")
    submit(alice, "train", cpu=1, replicas=2)

    outcome = tick()

    lines = json_lines()
    submitted = next(line for line in lines if line.get("action") == "job.submit")
    assert submitted["job"] == "/alice/train" and submitted["actor"] == "alice" and submitted["tasks"] == 2
    assert submitted["level"] == "INFO" and submitted["logger"] == "scheduler.jobs.submit"
    ticks = [line for line in lines if line["logger"] == "scheduler.tick.run"]
    assert len(ticks) == 1, "a tick logs one line"
    assert ticks[0]["tick"] == outcome.tick_id and ticks[0]["assigned"] == 2
    for phase in ("load_ms", "decide_ms", "apply_ms", "duration_ms"):
        assert isinstance(ticks[0][phase], float)


def test_writes_an_operator_traces_log_who_did_them(alice, olivia, ada, json_lines, django_capture_on_commit_callbacks):
    make_worker("w1")
    submit(alice, "train", cpu=1)
    with django_capture_on_commit_callbacks(execute=True):
        cancel_job(alice, "/alice/train")
        set_budget(ada, "alice", budget_limit=10, reason="pilot")
        grant = request_uplift(alice, budget_limit=5000, reason="deadline", duration_seconds=3600)
        approve_uplift(ada, grant.pk)
        drain_worker(olivia, "w1")

    by_action = {line.get("action"): line for line in json_lines() if line.get("action")}
    assert by_action["job.cancel"]["actor"] == "alice"
    assert by_action["budget.set"]["actor"] == "ada" and by_action["budget.set"]["target"] == "alice"
    assert by_action["uplift.request"]["actor"] == "alice"
    assert by_action["uplift.approve"]["actor"] == "ada"
    assert by_action["worker.drain"]["actor"] == "olivia" and by_action["worker.drain"]["worker"] == "w1"


def test_exceptions_are_one_json_line_with_the_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    line = JsonFormatter().format(record)

    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "failed here" and "ValueError: boom" in parsed["exc"]


def access_record(path: str, status: int) -> logging.LogRecord:
    record = logging.LogRecord(
        "django.server", logging.INFO, __file__, 1, '"%s" %s %s', (f"POST {path} HTTP/1.1", status, 10), None
    )
    record.status_code = status
    return record


@pytest.mark.parametrize(
    ("record", "chatter"),
    [
        (access_record("/api/v1/agent/heartbeat/", 200), True),
        (access_record("/api/v1/agent/logs/", 200), True),  # log shipping: 71% of the demo's log
        (access_record("/api/v1/agent/logs/", 413), False),
        (access_record("/readyz", 503), False),  # a failing probe is news
        (access_record("/api/v1/agent/heartbeat/", 403), False),
        (access_record("/api/v1/jobs/", 201), False),
        (logging.LogRecord("celery.beat", logging.INFO, __file__, 1, "Scheduler: Sending due task", (), None), True),
        (logging.LogRecord("celery.app.trace", logging.ERROR, __file__, 1, "Task raised", (), None), False),
        (logging.LogRecord("scheduler.tick", logging.INFO, __file__, 1, "tick 1", (), None), False),
        (
            logging.LogRecord("iris.agent", logging.INFO, __file__, 1, AGENT_STARTED, ("cpu-1", "/a/b/0", 1, 42), None),
            True,
        ),
        (
            logging.LogRecord("iris.agent", logging.INFO, __file__, 1, AGENT_EXITED, ("cpu-1", "/a/b/0", 1, 0), None),
            True,
        ),
        (
            logging.LogRecord("iris.agent", logging.INFO, __file__, 1, AGENT_EXITED, ("cpu-1", "/a/b/0", 1, 3), None),
            False,
        ),
        (
            logging.LogRecord("iris.agent", logging.INFO, __file__, 1, AGENT_EXITED, ("cpu-1", "/a/b/0", 1, 143), None),
            True,
        ),
        (
            logging.LogRecord(
                "iris.agent",
                logging.INFO,
                __file__,
                1,
                AGENT_STOPPING,
                ("cpu-1", "/a/b/0", 1, "Preempted by /c/d/0"),
                None,
            ),
            True,
        ),
        (logging.LogRecord("iris.agent", logging.INFO, __file__, 1, "agent %s registered", ("cpu-1",), None), False),
    ],
)
def test_chatter_is_dropped_at_info_and_shown_as_debug_at_debug(record, chatter):
    assert DemoteChatter("INFO").filter(record) is (not chatter)
    assert DemoteChatter("DEBUG").filter(record) is True
    assert (record.levelname == "DEBUG") is chatter


def test_the_json_format_is_chosen_by_the_environment():
    code = (
        "import logging, django; django.setup(); "
        "logging.getLogger('scheduler.x').info('hello %s', 'there', extra={'job': '/a/b', 'attempt': 2})"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "iris_web.settings", "IRIS_LOG_FORMAT": "json"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    line = json.loads(result.stderr.strip().splitlines()[-1])
    assert line["message"] == "hello there" and line["job"] == "/a/b" and line["attempt"] == 2

    env["IRIS_LOG_FORMAT"] = "text"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stderr.strip().splitlines()[-1].endswith("INFO scheduler.x: hello there")


def test_a_refused_page_is_one_warning_line_without_a_traceback(alice, caplog):
    """A researcher opening /scheduler/ (operators only) is refused with a 403; Django logs it
    with the PermissionDenied that refused it, which the console handler used to print in full."""
    from tests.web.conftest import client_for

    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client_for(alice).get("/scheduler/").status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(DemoteChatter("INFO"))
    handler.handle(record)
    assert handler.stream.getvalue() == "WARNING django.request: Forbidden (Permission denied): /scheduler/\n"


def test_the_agent_lines_demoted_are_the_ones_the_agent_writes():
    """The filter knows the agent's per-attempt lines by their format strings: if the agent's
    wording changes, this fails rather than the log filling up again unnoticed."""
    from pathlib import Path

    source = (Path(settings.BASE_DIR) / "scheduler" / "agent" / "worker.py").read_text()
    assert f'log.info("{AGENT_STARTED}"' in source
    assert f'log.info("{AGENT_EXITED}"' in source
    assert f'log.info("{AGENT_STOPPING}"' in source
