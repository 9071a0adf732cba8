"""Python work that needs no database, run while this thread waits on PostgreSQL.

A tick's writes leave this process idle while the server executes them (a COPY returns only
once the server has stored every row), and its Python work that reads nothing (building the
publication and the events) leaves the server idle. :func:`alongside` runs such work in a
second thread while the calling thread goes on issuing statements: psycopg waits on the
socket without holding the GIL, so the second thread runs during each wait.

The second thread shares the caller's database connection object for its bookkeeping only:
``transaction.on_commit`` called there registers in the caller's transaction, as it would
have run inline. It may not query: Django refuses a connection used by a thread other than
its own (``DatabaseError``), so a read slipped into such work fails loudly rather than
opening a second connection outside the transaction. Elsewhere than on PostgreSQL (SQLite
runs in process: there is no server to wait on) the work runs inline, when it is started.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")

# While the second thread runs, the calling thread gets the GIL back within this many seconds
# of its statement's result arriving (the default, 5 ms, would leave the server idle that
# long after each statement).
SWITCH_INTERVAL = 0.0005


class Work(Generic[T]):
    """Work started by :func:`alongside`; :meth:`result` waits for it."""

    def __init__(self, function: Callable[[], T]) -> None:
        self._function = function
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _run(self, connection) -> None:
        connections[DEFAULT_DB_ALIAS] = connection
        try:
            self._value = self._function()
        except BaseException as error:  # handed to the caller by result()
            self._error = error
        finally:
            del connections[DEFAULT_DB_ALIAS]

    def _run_inline(self) -> None:
        try:
            self._value = self._function()
        except BaseException as error:
            self._error = error

    def _start(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        if connection.vendor != "postgresql":
            self._run_inline()
            return
        self._thread = threading.Thread(target=self._run, args=(connection,), name="tick-alongside", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> T:
        """The work's value, once it has finished (its exception, if it raised)."""
        self.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value  # type: ignore[return-value]


@contextmanager
def alongside(function: Callable[[], T]) -> Iterator[Work[T]]:
    """Start ``function`` (no database reads or writes) beside the block; yields its
    :class:`Work`. The block ends only once the work has (whether or not the block asked for its
    result, and whether or not it raised), so nothing it registers outlives the transaction."""
    interval = sys.getswitchinterval()
    work = Work(function)
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    try:
        work._start()
        yield work
    finally:
        work.join()
        sys.setswitchinterval(interval)
