"""Celery tasks: one-line wrappers around the shell. They take ids, never model instances."""

from celery import shared_task
from django.utils import timezone

from scheduler import grants
from scheduler.tick import run_tick


@shared_task(name="scheduler.tick", ignore_result=True)
def tick() -> None:
    run_tick()


@shared_task(name="scheduler.expire_uplifts", ignore_result=True)
def expire_uplifts() -> None:
    grants.expire_uplifts(timezone.now())


@shared_task(name="scheduler.dispatch", ignore_result=True)
def dispatch() -> None:
    from scheduler import dispatch as outbox

    outbox.drain()


@shared_task(name="scheduler.check_workers", ignore_result=True)
def check_workers() -> None:
    from scheduler import reports

    reports.check_workers()
    reports.sync_backends()


@shared_task(name="scheduler.sync_kubernetes", ignore_result=True)
def sync_kubernetes() -> None:
    from scheduler import provisioning

    provisioning.sync_kubernetes()


@shared_task(name="scheduler.provision_tpu", ignore_result=True)
def provision_tpu() -> None:
    from scheduler import provisioning

    provisioning.provision_tpu()
