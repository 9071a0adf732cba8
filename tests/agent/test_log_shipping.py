"""The agent's log shipper against a live server: it resumes where the server says, stops at the
server's per-attempt bound, and gives up on an attempt the server refuses it."""

from __future__ import annotations

import pytest

from scheduler.agent.client import AgentClient
from scheduler.agent.logship import CHUNK_BYTES, LogShipper
from scheduler.agent.process import log_path
from scheduler.execution.enrolment import issue_worker_credential
from scheduler.execution.logs import log_file
from scheduler.models import Attempt
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def placed(settings, tmp_path):
    """One attempt placed on w1; its agent's log is on "another host" (a directory the server
    never reads)."""
    settings.TASK_LOG_DIR = tmp_path / "server-logs"
    make_worker("w1")
    make_job("/alice/train")
    run_tick(NOW_MS)
    attempt = Attempt.objects.get()
    remote = tmp_path / "agent-host"
    return (attempt.task_id, attempt.number), remote


def shipper(live_server, remote, worker="w1") -> LogShipper:
    client = AgentClient(live_server.url, issue_worker_credential(worker, by="tests"))
    return LogShipper(client, worker, remote)


def test_the_whole_log_arrives_in_chunks_and_only_new_bytes_are_sent_again(live_server, placed, settings):
    key, remote = placed
    path = log_path(remote, *key)
    path.parent.mkdir(parents=True)
    body = b"".join(b"line %06d\n" % i for i in range(CHUNK_BYTES // 10 + 50))  # more than one chunk
    path.write_bytes(body)
    ship = shipper(live_server, remote)
    ship.ship(key, final=True)
    with open(path, "ab") as handle:
        handle.write(b"the end\n")
    ship.ship(key)
    assert log_file(settings.SHIPPED_LOG_DIR, *key).read_bytes() == body + b"the end\n"
    assert ship.offsets[key] == len(body) + 8


def test_the_shipper_stops_at_the_servers_bound(live_server, placed, settings):
    settings.TASK_LOG_MAX_BYTES = 100
    key, remote = placed
    path = log_path(remote, *key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * 1000)
    ship = shipper(live_server, remote)
    ship.ship(key, final=True)
    assert key in ship.finished
    stored = log_file(settings.SHIPPED_LOG_DIR, *key).read_bytes()
    assert stored.startswith(b"x" * 100 + b"\n[iris] log cut at 100 bytes")
    path.write_bytes(b"x" * 2000)
    ship.ship(key, final=True)  # nothing more is sent
    assert log_file(settings.SHIPPED_LOG_DIR, *key).read_bytes() == stored


def test_an_agent_refused_another_workers_attempt_gives_up_on_it(live_server, placed, settings):
    key, remote = placed
    make_worker("w2")
    path = log_path(remote, *key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not mine\n")
    ship = shipper(live_server, remote, worker="w2")
    ship.ship(key)
    assert key in ship.finished
    assert not log_file(settings.SHIPPED_LOG_DIR, *key).exists()


def test_the_servers_copy_is_readable_by_the_servers_user_alone(live_server, placed, settings, tmp_path):
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    settings.SHIPPED_LOG_DIR.mkdir(mode=0o755)  # made open by an older server
    key, remote = placed
    path = log_path(remote, *key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"private output\n")

    shipper(live_server, remote).ship(key, final=True)

    copy = log_file(settings.SHIPPED_LOG_DIR, *key)
    assert copy.read_bytes() == b"private output\n"
    modes = [oct(p.stat().st_mode & 0o777) for p in (copy, copy.parent, settings.SHIPPED_LOG_DIR)]
    assert modes == ["0o600", "0o700", "0o700"]
