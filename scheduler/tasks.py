"""Celery tasks: one-line wrappers around the use cases. They take ids, never model instances.

The use cases never import this module: they ask for a task by its name (``scheduler.foundation.enqueue``).
"""

import logging

from celery import shared_task
from django.utils import timezone

from scheduler.foundation.access import delete_expired_tokens as delete_expired_api_tokens
from scheduler.budgets.writes import expire_uplifts as expire_due_uplifts

from scheduler.events.sequence import sequence_events as move_committed_events
from scheduler.execution.dispatcher import drain
from scheduler.execution.workers import check_workers as declare_lost_workers
from scheduler.jobs.prompt_tick import end_prompt_tick, start_prompt_tick
from scheduler.notifications.delivery import run_notifications
from scheduler.notifications.retention import prune_deliveries
from scheduler.provisioning.kubernetes import sync_kubernetes as sync_kubernetes_backend
from scheduler.provisioning.sync import sync_backends
from scheduler.provisioning.tpu import provision_tpu as provision_tpu_slices
from scheduler.tick.estimates import estimate_start_times_if_due
from scheduler.tick.history import prune_history as prune_history_by_settings
from scheduler.tick.collector import collect_if_due
from scheduler.tick.run import run_tick

log = logging.getLogger(__name__)


@shared_task(name="scheduler.tick", ignore_result=True)
def tick(scheduled: bool = False) -> None:
    # Before it reads: a submission after this asks for another; a tick too soon after the last moves.
    if start_prompt_tick(scheduled=scheduled):
        try:
            run_tick()
        finally:
            end_prompt_tick()
        # After the tick, not inside it: the full collection its survivors, made old without a
        # scan, may have made due (scheduler.tick.collector).
        collect_if_due()


@shared_task(name="scheduler.expire_uplifts", ignore_result=True)
def expire_uplifts() -> None:
    expire_due_uplifts(timezone.now())


@shared_task(name="scheduler.delete_expired_tokens", ignore_result=True)
def delete_expired_tokens() -> None:
    delete_expired_api_tokens(timezone.now())


@shared_task(name="scheduler.sequence_events", ignore_result=True)
def sequence_events() -> None:
    move_committed_events()


@shared_task(name="scheduler.notify", ignore_result=True)
def notify() -> None:
    run_notifications()


@shared_task(name="scheduler.prune_notifications", ignore_result=True)
def prune_notifications() -> None:
    prune_deliveries(timezone.now())


@shared_task(name="scheduler.dispatch", ignore_result=True)
def dispatch() -> None:
    drain()


@shared_task(name="scheduler.check_workers", ignore_result=True)
def check_workers() -> None:
    declare_lost_workers()
    sync_backends()


@shared_task(name="scheduler.sync_kubernetes", ignore_result=True)
def sync_kubernetes() -> None:
    sync_kubernetes_backend()


@shared_task(name="scheduler.provision_tpu", ignore_result=True)
def provision_tpu() -> None:
    provision_tpu_slices()


@shared_task(name="scheduler.estimate_starts", ignore_result=True)
def estimate_starts() -> None:
    estimate_start_times_if_due()


@shared_task(name="scheduler.prune_history", ignore_result=True)
def prune_history() -> None:
    done = prune_history_by_settings(timezone.now())
    log.info(
        "pruned %d tick record(s), %d preemption event(s) and %d shipped log(s) (%d bytes)%s",
        done.tick_records,
        done.preemption_events,
        done.shipped_logs,
        done.shipped_log_bytes,
        "" if done.finished else "; the time budget ran out, the next run goes on",
        extra={
            "action": "history.pruned",
            "tick_records": done.tick_records,
            "preemption_events": done.preemption_events,
            "shipped_logs": done.shipped_logs,
            "bytes": done.shipped_log_bytes,
            "finished": done.finished,
        },
    )
