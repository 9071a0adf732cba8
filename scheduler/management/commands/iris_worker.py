"""Run a worker agent: register a worker with declared capacity and run what is placed on it.

    python manage.py iris_worker --name cpu-1 --server http://127.0.0.1:8000 --token-file var/demo-agent-token \\
        --cpu 4 --memory 8Gi
    python manage.py iris_worker --name slice-a-0 --cpu 8 --memory 16Gi --tpu v5p-8:4 \\
        --attribute tpu-name=slice-a --attribute tpu-worker-id=0

Declared accelerators let a laptop stand in for a GPU host or a TPU slice host. The agent needs
no database: it talks to the server's agent API with a token of an operator or a member of
``iris-agents``. SIGTERM or Ctrl-C stops its processes, reports them and exits.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.agent.client import AgentClient
from scheduler.agent.worker import Agent


def device_option(value: str, kind: str) -> dict:
    variant, _, count = value.partition(":")
    if not variant or not count.isdigit() or int(count) < 1:
        raise CommandError(f"--{kind} expects VARIANT:COUNT, e.g. v5p-8:4; got {value!r}")
    return {"type": kind, "variant": variant, "count": int(count)}


class Command(BaseCommand):
    help = "Run a worker agent that registers a worker, heartbeats and runs the attempts placed on it."
    requires_system_checks = []  # the agent does not use the database or the cluster config

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="worker name (unique in the cluster)")
        parser.add_argument("--server", default="http://127.0.0.1:8000", help="the Iris Web server URL")
        parser.add_argument("--token", default="", help="API token (default: IRIS_AGENT_TOKEN)")
        parser.add_argument("--token-file", default="", help="read the API token from this file")
        parser.add_argument("--cpu", required=True, help="cores, e.g. 4 or 0.5")
        parser.add_argument("--memory", required=True, help="bytes or a size, e.g. 8Gi")
        accel = parser.add_mutually_exclusive_group()
        accel.add_argument("--tpu", help="declared TPU chips as VARIANT:COUNT, e.g. v5p-8:4")
        accel.add_argument("--gpu", help="declared GPUs as VARIANT:COUNT, e.g. h100:8")
        parser.add_argument(
            "--attribute", action="append", default=[], metavar="KEY=VALUE",
            help="a worker attribute, repeatable: tpu-name=slice-a, tpu-worker-id=0, zone=...",
        )
        parser.add_argument("--backend", default="local", help="backend name of this worker (default local)")
        parser.add_argument(
            "--heartbeat-seconds", type=float, default=None,
            help="seconds between heartbeats (default IRIS_AGENT_HEARTBEAT_SECONDS)",
        )
        parser.add_argument(
            "--log-dir", default=None, help="where attempt logs are written (default IRIS_DATA_DIR/logs)"
        )

    def handle(self, *args, **options):
        token = options["token"] or settings.AGENT_TOKEN
        if options["token_file"]:
            try:
                token = Path(options["token_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read --token-file: {exc}") from None
        if not token:
            raise CommandError("no token: pass --token, --token-file or set IRIS_AGENT_TOKEN")
        attributes = {}
        for item in options["attribute"]:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CommandError(f"--attribute expects KEY=VALUE; got {item!r}")
            attributes[key] = value
        device = None
        if options["tpu"]:
            device = device_option(options["tpu"], "tpu")
        elif options["gpu"]:
            device = device_option(options["gpu"], "gpu")
        capacity = {
            "name": options["name"],
            "cpu": options["cpu"],
            "memory": options["memory"],
            "device": device,
            "attributes": attributes,
            "backend": options["backend"],
        }
        logging.getLogger("iris.agent").setLevel(logging.INFO)
        agent = Agent(
            AgentClient(options["server"], token),
            capacity,
            log_dir=Path(options["log_dir"]) if options["log_dir"] else settings.TASK_LOG_DIR,
            heartbeat_seconds=options["heartbeat_seconds"] or settings.AGENT_HEARTBEAT_SECONDS,
        )

        def leave(signum, frame):
            agent.stop()

        signal.signal(signal.SIGTERM, leave)
        signal.signal(signal.SIGINT, leave)
        agent.run()
