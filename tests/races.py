"""Two transactions meeting on PostgreSQL: each waits at a chosen point until the other has got
there too, or is blocked on a lock the first one holds. Without the lock under test both reach
the point, as they would under load; with it, the second waits for the first's commit."""

from __future__ import annotations

import threading
import time

from django.db import connection

# How long the rendezvous waits for the other report at most (it is normally there at once).
RENDEZVOUS_SECONDS = 20


class Rendezvous:
    """Each report, after its completion check, waits until the other has got there too or is
    blocked on a lock the first one holds (then waiting longer would deadlock the test)."""

    def __init__(self) -> None:
        self.arrived: dict[str, bool] = {}
        self.done: set[str] = set()
        self.pids: dict[str, int] = {}
        self.lock = threading.Lock()

    def register(self, name: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            self.pids[name] = cursor.fetchone()[0]

    def wait(self, name: str) -> None:
        with self.lock:
            self.arrived[name] = True
        other = next(n for n in self.pids if n != name)
        deadline = time.monotonic() + RENDEZVOUS_SECONDS
        while time.monotonic() < deadline:
            if self.arrived.get(other) or other in self.done:
                return
            with connection.cursor() as cursor:
                # Computed from the lock manager now (pg_stat_activity would be this
                # transaction's cached snapshot).
                cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [self.pids[other]])
                if cursor.fetchone()[0]:
                    return
            time.sleep(0.005)
