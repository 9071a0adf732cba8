"""The backend contract: how the shell starts and stops task attempts where they run, and how
what really happened there comes back.

A backend is the only code that knows *how* a task runs (a process under a local worker agent,
a pod under Kueue, a process on a TPU VM). The shell owns *what* must happen and when:

- ``scheduler.tick`` decides and writes intents (START a new attempt, STOP an attempt that
  ended) into the outbox, ``DispatchIntent``, in the same transaction as its decision;
- ``scheduler.execution.dispatcher`` drains the outbox after commit and calls :meth:`Backend.start` /
  :meth:`Backend.stop` with an order built from the rows, then records the :class:`Delivery`;
- what happened on the backend comes back as :class:`AttemptReport` values (pushed by worker
  agents through the API, or returned by :meth:`Backend.sync` for backends the shell polls),
  and ``scheduler.execution.attempts`` applies them to attempts, tasks and jobs with conditional updates.

Rules every backend follows:

1. **Idempotent by attempt.** An attempt is named by :class:`AttemptRef` (task primary key and
   attempt number; ``uid`` is a stable name to give a pod or process). ``start`` may be called
   more than once for the same attempt (the dispatcher retries after errors and after crashing
   between sending and recording); the second call must not start a second copy. ``stop`` of
   an attempt that is stopping or gone is not an error.
2. **Never write the database.** Backends return values and raise errors; the shell writes.
3. **Errors say whether to retry.** Raise :class:`BackendError` for anything worth retrying (the
   dispatcher backs off exponentially up to ``IRIS_DISPATCH_MAX_TRIES``, keeping the message for
   operators) and :class:`PermanentBackendError` when retrying cannot help.
4. **Report what really happened, not what was asked.** An attempt frees its worker's capacity
   only when a report says it ended (or ``stop`` returns :attr:`Delivery.FINISHED`). Late and
   duplicate reports are harmless: the shell never revives an attempt that has ended.

This module imports no Django, so a backend can be tested without a database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import ClassVar

from scheduler.core.bands import Band
from scheduler.core.types import Resources


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """One attempt of one task: what every order and report is keyed by."""

    task_pk: int
    attempt: int

    @property
    def uid(self) -> str:
        """A stable name for this attempt, safe in DNS labels and file names: ``"<task>-<attempt>"``."""
        return f"{self.task_pk}-{self.attempt}"


@dataclass(frozen=True, slots=True)
class StartOrder:
    """Run attempt ``ref`` of task ``task`` on ``worker``.

    ``band`` is the band stamped at assignment (the effective band: use it for priority classes).
    ``environment`` is what the process must see (``IRIS_TASK_ID``, ``IRIS_ATTEMPT``,
    ``IRIS_BAND``, ...). ``group_by`` is set for gangs (coscheduled jobs): all ``replicas`` tasks
    of ``job`` run together on workers sharing that attribute.
    """

    ref: AttemptRef
    task: str
    job: str
    user: str
    index: int
    replicas: int
    worker: str
    band: Band
    command: tuple[str, ...]
    environment: Mapping[str, str]
    resources: Resources
    group_by: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StopOrder:
    """Stop attempt ``ref``: SIGTERM (or the backend's equivalent), then kill after ``grace_seconds``.

    ``reason`` says why, for logs and events ("Preempted by /bob/serve/0", "Killed by alice").
    ``worker`` is None when the worker row is gone.
    """

    ref: AttemptRef
    task: str
    worker: str | None
    reason: str
    grace_seconds: float


class Delivery(str, Enum):
    """What became of an order handed to a backend."""

    # The backend has it and will report what happens (a local agent will fetch it).
    DELIVERED = "delivered"
    # The backend confirmed it took effect (a pod was created or deleted); reports still follow.
    DONE = "done"
    # Stop only: nothing runs for this attempt there (it never started, or is already gone).
    # The shell marks the attempt finished at once, freeing its capacity.
    FINISHED = "finished"


class AttemptStatus(str, Enum):
    """What really happened to an attempt, as a backend reports it."""

    BUILDING = "building"  # setting up (pulling an image, creating a pod)
    RUNNING = "running"  # the process runs
    SUCCEEDED = "succeeded"  # exited 0 on its own
    FAILED = "failed"  # exited non-zero on its own, or could not be started
    PREEMPTED = "preempted"  # stopped by the backend or at our request (a stop order, an eviction)
    WORKER_LOST = "worker_lost"  # the host or its agent went away with the process

    @property
    def is_terminal(self) -> bool:
        return self not in (AttemptStatus.BUILDING, AttemptStatus.RUNNING)


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """A fact about one attempt. ``exit_code`` for ended processes when known.

    ``worker`` names the worker the report comes from; when set, a report about an attempt
    placed on another worker is ignored (an agent speaks only for its own host).
    """

    ref: AttemptRef
    status: AttemptStatus
    exit_code: int | None = None
    message: str = ""
    worker: str | None = None
    at: datetime | None = field(default=None, compare=False)


class BackendError(Exception):
    """A delivery failed and may succeed later; the dispatcher retries with backoff."""


class PermanentBackendError(BackendError):
    """A delivery can never succeed (invalid order, unsupported request); not retried."""


class Backend(ABC):
    """Where tasks run. One instance per backend name, shared by every dispatch in a process.

    Subclasses set ``name`` (the value of ``Worker.backend`` routed to them) and implement
    :meth:`start` and :meth:`stop`. Backends the shell must poll for status implement
    :meth:`sync`; backends whose workers run an agent that heartbeats set ``heartbeats`` so the
    shell declares a worker lost when its heartbeats stop.
    """

    name: ClassVar[str]
    # Workers of this backend heartbeat through the agent API; missing heartbeats past
    # IRIS_WORKER_GRACE_SECONDS mean the worker is lost.
    heartbeats: ClassVar[bool] = False

    @abstractmethod
    def start(self, order: StartOrder) -> Delivery:
        """Start the attempt, at most once however often this is called. DELIVERED or DONE."""

    @abstractmethod
    def stop(self, order: StopOrder) -> Delivery:
        """Stop the attempt (grace, then kill). DELIVERED, DONE, or FINISHED if nothing runs."""

    def sync(self, now: datetime) -> Iterable[AttemptReport]:
        """Reports of what changed since the last call, for backends the shell polls. Default: none."""
        return ()
