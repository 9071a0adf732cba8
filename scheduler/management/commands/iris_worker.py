"""Run a worker agent: register a worker with declared capacity and run what is placed on it.

    python manage.py worker_credential cpu-1 --file var/worker-credentials/cpu-1   # an operator, once
    python manage.py iris_worker --name cpu-1 --server http://127.0.0.1:8000 \\
        --token-file var/worker-credentials/cpu-1 --cpu 4 --memory 8Gi
    python manage.py iris_worker --name slice-a-0 --cpu 8 --memory 16Gi --tpu v5p-8:4 \\
        --attribute tpu-name=slice-a --attribute tpu-worker-id=0

Declared accelerators let a laptop stand in for a GPU host or a TPU slice host. The agent needs
no database: it talks to the server's agent API with its worker's own credential, which an
operator mints for that worker name (``manage.py worker_credential NAME`` or
``POST /api/v1/workers/NAME:credential``) and which lets it act only as that worker. SIGTERM or Ctrl-C stops its processes, reports them and exits.

Before anything else the agent makes itself non-dumpable, reads its token into memory and
scrubs ``IRIS_AGENT_TOKEN`` from its environment. Run as root, it runs each attempt as a uid of
its own (``--task-identity``, default ``dynamic``) in a PID namespace of its own; run as an
ordinary user, it says once that its tasks are not isolated from each other.
docs/operations.md ("Agent modes") says what each mode guarantees.
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.agent.client import AgentClient
from scheduler.agent.credentials import make_non_dumpable, scrub_environment
from scheduler.agent.process import (
    AccountIdentity,
    DynamicIdentity,
    Isolation,
    SharedIdentity,
    TaskUser,
    can_create_pid_namespace,
    closed_ancestor,
)
from scheduler.agent.state import AttemptState, StateDirInUse
from scheduler.agent.worker import Agent

log = logging.getLogger("iris.agent")


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
        parser.add_argument("--token", default="", help="the worker's credential (default: IRIS_AGENT_TOKEN)")
        parser.add_argument(
            "--token-file",
            default="",
            help="read the worker's credential from this file (manage.py worker_credential --file)",
        )
        parser.add_argument("--cpu", required=True, help="cores, e.g. 4 or 0.5")
        parser.add_argument("--memory", required=True, help="bytes or a size, e.g. 8Gi")
        accel = parser.add_mutually_exclusive_group()
        accel.add_argument("--tpu", help="declared TPU chips as VARIANT:COUNT, e.g. v5p-8:4")
        accel.add_argument("--gpu", help="declared GPUs as VARIANT:COUNT, e.g. h100:8")
        parser.add_argument(
            "--attribute",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a worker attribute, repeatable: tpu-name=slice-a, tpu-worker-id=0, zone=...",
        )
        parser.add_argument("--backend", default="local", help="backend name of this worker (default local)")
        parser.add_argument(
            "--heartbeat-seconds",
            type=float,
            default=None,
            help="seconds between heartbeats (default IRIS_AGENT_HEARTBEAT_SECONDS)",
        )
        parser.add_argument(
            "--log-dir", default=None, help="where attempt logs are written (default IRIS_DATA_DIR/logs)"
        )
        parser.add_argument(
            "--task-identity",
            choices=["dynamic", "account", "user"],
            default=None,
            help="who a root agent runs each attempt as: a uid of its own (dynamic, the default), the job "
            "owner's Unix account (account), or --task-user (user) (default IRIS_AGENT_TASK_IDENTITY)",
        )
        parser.add_argument(
            "--task-user",
            default=None,
            help="the one Unix user of --task-identity user; giving it chooses that identity (default IRIS_AGENT_TASK_USER)",
        )
        parser.add_argument(
            "--uid-range",
            default=None,
            help="uids of the dynamic identity, FIRST-LAST (default IRIS_AGENT_UID_RANGE)",
        )
        parser.add_argument(
            "--no-pid-namespace",
            action="store_true",
            help="run attempts without a PID namespace of their own (default: with one where the host allows it)",
        )
        parser.add_argument(
            "--memory-cgroup",
            default=None,
            help="a cgroup directory delegated to this agent to hold attempts to their memory "
            "(default IRIS_AGENT_MEMORY_CGROUP; none: an address-space limit)",
        )
        parser.add_argument(
            "--state-dir",
            default=None,
            help="where the agent keeps its live process groups (default IRIS_DATA_DIR/agents/<name>)",
        )
        parser.add_argument(
            "--work-dir",
            default=None,
            help="parent of the attempts' working directories (default IRIS_DATA_DIR/work/<name>)",
        )

    def handle(self, *args, **options):
        logging.getLogger("iris.agent").setLevel(logging.INFO)
        # Before the token is in memory: same-uid processes cannot read /proc/<pid>/environ|mem.
        if not make_non_dumpable():
            log.warning("could not make the agent non-dumpable: same-uid processes can read its memory")
        token = options["token"] or settings.AGENT_TOKEN
        scrub_environment("IRIS_AGENT_TOKEN")
        if options["token_file"]:
            try:
                token = Path(options["token_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read --token-file: {exc}") from None
        if not token:
            raise CommandError(
                "no credential: pass --token-file (or --token, or set IRIS_AGENT_TOKEN) with the worker's credential, "
                f"which an operator mints with: manage.py worker_credential {options['name']} --file PATH"
            )
        if options["token"]:
            log.warning("--token is visible to every local user in ps; prefer --token-file")
        isolation = self.isolation(options)
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
        name = options["name"]
        work_dir = Path(options["work_dir"]) if options["work_dir"] else settings.DATA_DIR / "work" / name
        closed = closed_ancestor(work_dir.parent) if not isinstance(isolation.identity, SharedIdentity) else None
        if closed is not None:
            log.warning(
                "%s is closed to other users: attempts start in their working directories under %s but "
                "cannot reach them by path (HOME, TMPDIR); chmod o+x it, or pass --work-dir elsewhere",
                closed,
                work_dir,
            )
        state = AttemptState(
            Path(options["state_dir"]) if options["state_dir"] else settings.DATA_DIR / "agents" / name
        )
        try:
            state.take()
        except StateDirInUse as exc:
            raise CommandError(str(exc)) from None
        agent = Agent(
            AgentClient(options["server"], token),
            capacity,
            log_dir=Path(options["log_dir"]) if options["log_dir"] else settings.TASK_LOG_DIR,
            heartbeat_seconds=options["heartbeat_seconds"] or settings.AGENT_HEARTBEAT_SECONDS,
            work_dir=work_dir,
            state=state,
            isolation=isolation,
        )

        def leave(signum, frame):
            agent.stop()

        signal.signal(signal.SIGTERM, leave)
        signal.signal(signal.SIGINT, leave)
        agent.run()

    def isolation(self, options) -> Isolation:
        """How this agent runs attempts, said once in its log (docs/operations.md, "Agent modes")."""
        pid_namespace = settings.AGENT_PID_NAMESPACE and not options["no_pid_namespace"]
        if pid_namespace and not can_create_pid_namespace():
            log.warning(
                "this host gives attempts no PID namespace: processes that leave an attempt's process "
                "group are found by their IRIS_ATTEMPT_KEY and ended when it ends"
            )
            pid_namespace = False
        memory_cgroup = (
            options["memory_cgroup"] if options["memory_cgroup"] is not None else settings.AGENT_MEMORY_CGROUP
        )
        if memory_cgroup and not Path(memory_cgroup, "cgroup.procs").exists():
            raise CommandError(f"--memory-cgroup {memory_cgroup!r} is not a cgroup directory")
        return Isolation(self.identity(options), pid_namespace=pid_namespace, memory_cgroup=memory_cgroup)

    @staticmethod
    def identity(options, euid: int | None = None):
        """Who attempts run as (``euid``: the agent's, by default this process's). Not root: the agent's own user, said once with what to run
        instead. Root: ``dynamic`` unless a task user or another identity is asked for; a task
        user that does not exist stops the agent; ``root`` is accepted by name, with a warning."""
        user_name = options["task_user"] or settings.AGENT_TASK_USER
        chosen = options["task_identity"] or settings.AGENT_TASK_IDENTITY or ("user" if user_name else "dynamic")
        if chosen not in ("dynamic", "account", "user"):
            raise CommandError(f"IRIS_AGENT_TASK_IDENTITY must be dynamic, account or user; got {chosen!r}")
        euid = os.geteuid() if euid is None else euid
        if euid != 0:
            try:
                me = pwd.getpwuid(euid).pw_name
            except KeyError:
                me = str(euid)
            if user_name and user_name != me:
                raise CommandError(
                    f"tasks can run as {user_name!r} only when the agent runs as root (it runs as {me!r})"
                )
            # Under `make run` (not root) the Makefile has said it once for all six demo agents.
            say = log.debug if settings.AGENT_SHARED_NOTICE_GIVEN else log.warning
            say(
                "tasks are not isolated from each other: this agent runs as %s, not root, so every task runs as %s "
                "and can read the others' files and logs and signal their processes. Run the agent as root to give "
                'each attempt a uid of its own (docs/operations.md, "Agent modes")',
                me,
                me,
            )
            return SharedIdentity(None)
        if user_name and chosen != "user":
            raise CommandError(f"--task-user is the user of --task-identity user, not of {chosen}")
        if chosen == "dynamic":
            try:
                identity = DynamicIdentity.parse(options["uid_range"] or settings.AGENT_UID_RANGE)
            except ValueError as exc:
                raise CommandError(f"IRIS_AGENT_UID_RANGE: {exc}") from None
            log.info("each attempt runs as a uid of its own from %s-%s", identity.first, identity.last)
            return identity
        if chosen == "account":
            log.info("each attempt runs as the Unix account named as its job's user")
            return AccountIdentity()
        try:
            user = TaskUser.named(user_name or "nobody")
        except KeyError:
            raise CommandError(
                f"the task user {user_name!r} does not exist: create it (useradd --system --no-create-home "
                f"--shell /usr/sbin/nologin {user_name}) or pass --task-user"
            ) from None
        if user.uid == 0:
            log.warning("tasks run as root: they can read the agent's token file and memory, and each other")
        else:
            log.warning(
                "every task runs as %s (uid %s): tasks are not isolated from each other, only from the "
                "agent; leave IRIS_AGENT_TASK_USER unset to give each attempt a uid of its own",
                user.name,
                user.uid,
            )
        return SharedIdentity(user)
