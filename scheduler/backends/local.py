"""The local backend: tasks run as processes under a worker agent (``manage.py iris_worker``).

Delivering an order here means putting it in the worker's mailbox: the dispatcher marks the
intent DELIVERED, and the agent receives every delivered intent of its worker in the response
to its next heartbeat (``scheduler.api.agent``). The agent starts each attempt at most once,
stops it with SIGTERM then SIGKILL after the grace period, and reports what happened, which
``scheduler.execution.attempts`` applies. So ``start`` and ``stop`` only need to accept the order; the
at-most-once guarantee lives in the agent (it remembers every attempt it has seen) and in the
acknowledgements (a START the agent confirmed is never handed out again).

Workers of this backend heartbeat: one silent for longer than ``IRIS_WORKER_GRACE_SECONDS`` is
declared lost.
"""

from __future__ import annotations

from scheduler.backends.base import Backend, Delivery, StartOrder, StopOrder


class LocalBackend(Backend):
    name = "local"
    heartbeats = True

    def start(self, order: StartOrder) -> Delivery:
        # The intent row is the mailbox; the agent fetches it on heartbeat.
        return Delivery.DELIVERED

    def stop(self, order: StopOrder) -> Delivery:
        if order.worker is None:
            # The worker row is gone, and with it any agent that could run the process.
            return Delivery.FINISHED
        return Delivery.DELIVERED
