"""The agent loop: register, heartbeat, run what the orders say, report what happened.

Guarantees:

- **At most once.** Every attempt the agent has been told about (started, or stopped before it
  started) is remembered; a repeated start order is answered with the attempt's current status
  and never starts a second process.
- **Nothing lost while the server is away.** Reports wait in a queue until the server accepts
  them; an attempt stays in the heartbeat's ``running`` list until its final report has been
  accepted, so the server never mistakes an unreported exit for a lost process.
- **Robust to server restarts.** Any failure to reach the server is retried at the heartbeat
  cadence while processes keep running; a server that no longer knows the worker (a 404 on
  heartbeat) gets a fresh registration.
- **A task never runs twice on one host.** Each live attempt's process group is in the state
  file (``scheduler/agent/state.py``); an agent that starts again first SIGKILLs whatever its
  previous life left running there, then registers and reports those attempts worker-lost (the
  first thing it sends), before it accepts any work.
- **Clean shutdown.** On SIGTERM/SIGINT the agent stops its processes (SIGTERM, SIGKILL after a
  short grace), reports them, says it is leaving (the worker becomes unhealthy) and exits.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.agent.client import AgentClient, ApiError, ServerUnreachable
from scheduler.agent.logship import LogShipper
from scheduler.agent.process import (
    AttemptProcess,
    IdentityError,
    Isolation,
    SharedIdentity,
    log_path,
    task_environment,
    work_path,
)
from scheduler.agent.state import AttemptState
from scheduler.core.explain import format_memory

log = logging.getLogger("iris.agent")

# How often the agent looks at its processes (exits are reported within this).
POLL_SECONDS = 0.1
# Longest wait between two tries to reach a server that is down.
MAX_BACKOFF_SECONDS = 30.0
# Grace given to processes when the agent itself shuts down (process managers wait ~5 s).
SHUTDOWN_GRACE_SECONDS = 3.0
# Attempts remembered for at-most-once starts; old ones are forgotten beyond this.
REMEMBER_ATTEMPTS = 100_000


@dataclass
class LocalAttempt:
    key: tuple[int, int]
    name: str
    process: AttemptProcess | None
    stopping: bool = False
    # The final report is queued: the attempt leaves the running list once it is accepted.
    final_queued: bool = False


class Agent:
    def __init__(
        self,
        client: AgentClient,
        capacity: dict[str, Any],
        *,
        log_dir: Path,
        heartbeat_seconds: float,
        work_dir: Path,
        state: AttemptState,
        isolation: Isolation | None = None,
    ):
        self.client = client
        self.capacity = capacity
        self.name: str = capacity["name"]
        self.log_dir = Path(log_dir)
        self.heartbeat_seconds = heartbeat_seconds
        self.work_dir = Path(work_dir)
        self.state = state
        self.isolation = isolation or Isolation(SharedIdentity(None))
        self.attempts: dict[tuple[int, int], LocalAttempt] = {}
        self.seen: dict[tuple[int, int], None] = {}  # insertion-ordered set
        self.outbox: list[dict[str, Any]] = []
        self.registered = False
        self.failures = 0
        self.stopping = threading.Event()
        self.logs = LogShipper(client, self.name, self.log_dir)

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        log.info("agent %s starting (server %s)", self.name, self.client.base)
        self.end_leftovers()
        next_heartbeat = 0.0
        while not self.stopping.is_set():
            self.poll_processes()
            if self.outbox and self.failures == 0:
                self.flush_reports()
            if time.monotonic() >= next_heartbeat:
                ok = self.beat()
                self.failures = 0 if ok else self.failures + 1
                delay = (
                    self.heartbeat_seconds
                    if ok
                    else min(self.heartbeat_seconds * 2**self.failures, MAX_BACKOFF_SECONDS)
                )
                next_heartbeat = time.monotonic() + delay
            self.stopping.wait(POLL_SECONDS)
        self.shutdown()

    def stop(self) -> None:
        self.stopping.set()

    def end_leftovers(self) -> None:
        """End what a previous life of this agent left running; queue their worker-lost reports,
        which go out right after registration, before the first heartbeat takes orders."""
        for left in self.state.end_leftovers():
            key = (left.task, left.attempt)
            self.remember(key)
            if left.killed:
                message = (
                    f"the agent on {self.name} restarted and ended {left.killed} process(es) "
                    "its previous run had left running"
                )
            else:
                message = f"the agent on {self.name} restarted; the attempt's processes had already ended"
            log.warning("agent %s: task %s attempt %s: %s", self.name, left.task, left.attempt, message)
            self.queue(key, "worker_lost", message=message)

    def beat(self) -> bool:
        """Register if needed, flush reports, heartbeat, and carry out the orders. True if the server answered."""
        try:
            if not self.registered:
                self.client.register(self.capacity)
                self.registered = True
                log.info("agent %s registered", self.name)
            if not self.flush_reports():
                return False
            for key in list(self.attempts):
                self.logs.ship(key)
            answer = self.client.heartbeat(self.name, self.running())
        except ServerUnreachable as exc:
            running = f"; {len(self.attempts)} attempt(s) keep running" if self.attempts else ""
            log.warning("agent %s: server unreachable (%s)%s; retrying", self.name, exc, running)
            return False
        except ApiError as exc:
            if exc.status == 404:
                log.warning("agent %s: the server does not know this worker; registering again", self.name)
                self.registered = False
            else:
                log.error("agent %s: %s", self.name, exc)
            return False
        for order in answer.get("stops", []):
            self.stop_attempt(order)
        for order in answer.get("starts", []):
            self.start_attempt(order)
        self.flush_reports()
        return True

    def running(self) -> list[dict[str, int]]:
        """Every attempt the server must consider running here: live, or ended but not yet reported."""
        return [{"task": task, "attempt": attempt} for task, attempt in self.attempts]

    # --- orders -----------------------------------------------------------------------------------

    def start_attempt(self, order: dict[str, Any]) -> None:
        key = (int(order["task"]), int(order["attempt"]))
        if key in self.seen:
            local = self.attempts.get(key)
            if local is not None and local.process is not None and not local.final_queued:
                self.queue(key, "running")  # acknowledge again; never a second process
            log.info("agent %s: ignoring a repeated start of %s attempt %s", self.name, order.get("name"), key[1])
            return
        self.remember(key)
        name = order.get("name") or str(key[0])
        command = [str(part) for part in order.get("command") or []]
        file = log_path(self.log_dir, *key)
        if not command:
            self.attempts[key] = LocalAttempt(key, name, None, final_queued=True)
            self.queue(key, "failed", exit_code=127, message="the job has no command to run")
            return
        try:
            user = self.isolation.identity.for_attempt(order)
        except IdentityError as exc:
            self.attempts[key] = LocalAttempt(key, name, None, final_queued=True)
            self.queue(key, "failed", exit_code=127, message=f"could not start {command[0]!r}: {exc}")
            return
        try:
            process = AttemptProcess.spawn(
                command,
                task_environment(order.get("env") or {}),
                file,
                key=self.state.marker(*key),
                work_dir=work_path(self.work_dir, *key),
                user=user,
                memory_bytes=int(order.get("memory") or 0),
                isolation=self.isolation,
            )
        except OSError as exc:
            self.attempts[key] = LocalAttempt(key, name, None, final_queued=True)
            self.queue(key, "failed", exit_code=127, message=f"could not start {command[0]!r}: {exc}")
            return
        finally:
            if user is not None:
                user.release()
        self.attempts[key] = LocalAttempt(key, name, process)
        self.state.add(key, process.pid, user.uid if user is not None and user.own else None)
        log.info("agent %s: started %s attempt %s (pid %s)", self.name, name, key[1], process.pid)
        self.queue(key, "running")

    def stop_attempt(self, order: dict[str, Any]) -> None:
        key = (int(order["task"]), int(order["attempt"]))
        local = self.attempts.get(key)
        if local is None:
            # Never started here (or long finished): remember it so a late start is ignored.
            self.remember(key)
            self.queue(key, "preempted", message="stopped before it ran here")
            return
        if local.process is None or local.stopping or local.final_queued:
            return
        local.stopping = True
        grace = float(order.get("grace_seconds", 10))
        reason = order.get("reason") or "stop requested"
        local.process.note(f"stopping: {reason} (SIGTERM, SIGKILL after {grace:g}s)")
        log.info("agent %s: stopping %s attempt %s: %s", self.name, local.name, key[1], reason)
        local.process.terminate(grace)

    # --- processes and reports ------------------------------------------------------------------

    def poll_processes(self) -> None:
        for key, local in list(self.attempts.items()):
            if local.process is None or local.final_queued:
                continue
            code = local.process.poll()
            if code is None:
                continue
            local.final_queued = True
            self.ended(local)
            if local.stopping:
                self.queue(key, "preempted", exit_code=code, message=f"stopped as asked (exit code {code})")
            elif local.process.out_of_memory:
                limit = format_memory(local.process.memory_bytes)
                local.process.note(f"killed: out of memory (limit {limit})")
                self.queue(key, "failed", exit_code=code, message=f"killed: out of memory (limit {limit})")
            elif code == 0:
                self.queue(key, "succeeded", exit_code=0)
            else:
                self.queue(key, "failed", exit_code=code)
            log.info("agent %s: %s attempt %s exited with %s", self.name, local.name, key[1], code)

    def ended(self, local: LocalAttempt) -> None:
        """The attempt's process group is gone: forget it on disk, remove its working directory."""
        self.state.remove(local.key)
        local.process.remove_work_dir()

    def queue(self, key: tuple[int, int], status: str, *, exit_code: int | None = None, message: str = "") -> None:
        self.outbox.append(
            {"task": key[0], "attempt": key[1], "status": status, "exit_code": exit_code, "message": message}
        )

    def flush_reports(self) -> bool:
        """Send queued reports. False if the server could not take them (they stay queued)."""
        if not self.outbox:
            return True
        batch = self.outbox[:1000]
        final = {"succeeded", "failed", "preempted", "worker_lost"}
        try:
            # A final report lets the attempt be forgotten here: its whole log goes first.
            for report in batch:
                if report["status"] in final:
                    self.logs.ship((report["task"], report["attempt"]), final=True)
            self.client.report(self.name, batch)
        except ServerUnreachable as exc:
            log.warning("agent %s: could not report (%s); will retry", self.name, exc)
            return False
        except ApiError as exc:
            if exc.status == 404:
                self.registered = False
                return False
            # The server refused them as malformed: retrying cannot help.
            log.error("agent %s: reports rejected: %s", self.name, exc)
        del self.outbox[: len(batch)]
        for report in batch:
            key = (report["task"], report["attempt"])
            local = self.attempts.get(key)
            if report["status"] in final and local is not None and local.final_queued:
                del self.attempts[key]
                self.logs.forget(key)
        return True

    def remember(self, key: tuple[int, int]) -> None:
        self.seen[key] = None
        while len(self.seen) > REMEMBER_ATTEMPTS:
            self.seen.pop(next(iter(self.seen)))

    # --- leaving ----------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every process, report them, tell the server this worker is leaving."""
        live = [local for local in self.attempts.values() if local.process is not None and not local.final_queued]
        for local in live:
            local.process.note("stopping: the worker agent is shutting down")
            local.process.terminate(SHUTDOWN_GRACE_SECONDS)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS + 1
        while time.monotonic() < deadline and any(local.process.poll() is None for local in live):
            time.sleep(POLL_SECONDS)
        for local in live:
            code = local.process.poll()
            if code is None:
                local.process.kill()
                try:
                    code = local.process.popen.wait(timeout=SHUTDOWN_GRACE_SECONDS)
                except Exception:  # noqa: BLE001 - still listed in the state file for the next start
                    code = None
            if code is not None:
                self.ended(local)
            local.final_queued = True
            if local.stopping:
                self.queue(local.key, "preempted", exit_code=code, message=f"stopped as asked (exit code {code})")
            else:
                self.queue(local.key, "worker_lost", exit_code=code, message=f"the agent on {self.name} shut down")
        try:
            if self.registered:
                self.flush_reports()
                self.client.heartbeat(self.name, self.running(), healthy=False)
        except (ServerUnreachable, ApiError) as exc:
            log.warning("agent %s: could not say goodbye: %s", self.name, exc)
        log.info("agent %s stopped", self.name)
