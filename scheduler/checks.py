"""Start-up checks: refuse to run with an invalid cluster config.

``check_cluster_config`` is a Django system check, so ``runserver``, ``migrate`` and
``manage.py check`` stop with the config's error (naming the tier and the field). The Celery
worker runs Django's checks too but ignores their result, so the same check is also wired to
Celery's ``worker_init`` and ``beat_init`` signals, where it exits the process.
"""

from __future__ import annotations

from celery.signals import beat_init, worker_init
from django.conf import settings
from django.core.checks import Error, register

from scheduler.foundation.cluster_config import ClusterConfigError, read_cluster_config

INVALID_CLUSTER_CONFIG = "scheduler.E001"


@register()
def check_cluster_config(app_configs=None, **kwargs) -> list[Error]:
    """An error when ``IRIS_CLUSTER_CONFIG`` names a file that is missing or invalid."""
    path = settings.CLUSTER_CONFIG
    if not path:
        return []
    try:
        read_cluster_config(path)
    except ClusterConfigError as exc:
        message = str(exc)
        return [
            Error(
                f"invalid cluster config: {message if path in message else f'{path}: {message}'}",
                hint="Fix the file named by IRIS_CLUSTER_CONFIG (see config/cluster.example.toml), or unset it.",
                id=INVALID_CLUSTER_CONFIG,
            )
        ]
    return []


@worker_init.connect
@beat_init.connect
def refuse_invalid_cluster_config(**kwargs) -> None:
    """Exit the Celery worker or beat before it runs a tick under a config nobody meant.

    SystemExit, because Celery logs and swallows ordinary exceptions raised by signal handlers.
    """
    errors = check_cluster_config()
    if errors:
        raise SystemExit("\n".join(f"{e.id}: {e.msg}" for e in errors))
