"""The suite keeps to itself: with no IRIS_TEST_REDIS_URL its ``redis`` tests use a Redis server
it started (the embedded broker's binary, on a unix socket in its own temp dir), never a server
on 127.0.0.1:6379 that someone else may be using."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.conftest import OWN_REDIS_SOCKET, REDIS_TEST_URL, SHARED_REDIS, test_redis_urls


def test_without_a_named_server_the_suite_uses_its_own_socket(tmp_path):
    socket = tmp_path / "redis.sock"
    cache, broker = test_redis_urls({}, socket)
    assert cache == f"unix://{socket}?db=0"
    assert broker == f"redis+socket://{socket}"
    assert "6379" not in cache + broker


def test_a_named_server_is_used_for_the_cache_and_the_broker(tmp_path):
    cache, broker = test_redis_urls({"IRIS_TEST_REDIS_URL": "redis://redis.example:6379/3"}, tmp_path / "s")
    assert cache == broker == "redis://redis.example:6379/3"


@pytest.mark.redis
def test_redis_tests_talk_to_the_server_the_suite_started():
    client = redis.Redis.from_url(REDIS_TEST_URL)
    assert client.ping()
    if not SHARED_REDIS:
        assert Path(client.connection_pool.connection_kwargs["path"]) == OWN_REDIS_SOCKET
        assert OWN_REDIS_SOCKET.parent.stat().st_mode & 0o077 == 0  # mkdtemp: this user's only
