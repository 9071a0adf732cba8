"""Run real project processes (Celery worker and beat) against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from tests.conftest import REDIS_TEST_BROKER_URL, REDIS_TEST_URL

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """A URL for the database this test runs on, for child processes."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def project_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "IRIS_DATABASE_URL": test_database_url(),
            "IRIS_REDIS_URL": REDIS_TEST_URL,
            "IRIS_BROKER_URL": REDIS_TEST_BROKER_URL,
            "IRIS_DATA_DIR": str(tmp_path / "data"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def start(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen, timeout: float = 15) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(predicate, timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
