"""Keep the demo cluster busy: submit a mix of bands, sizes and gangs as the demo users.

    python manage.py demo_load                # until stopped (make run DEMO_LOAD=1 runs this)
    python manage.py demo_load --count 10     # ten jobs, then exit

The mix is chosen so that within a minute you see bob's and carol's INTERACTIVE work run as
BATCH once they pass their budgets, admin's PRODUCTION jobs preempt BATCH work on the CPU
hosts, and alice's four-host TPU gang preempt BATCH work on the slice. Every job goes through
``scheduler.jobs.submit.submit_job``, the same rules as the API. Submissions pause while more than
``--max-pending`` tasks wait, so the queue never grows without bound; it says when it pauses
and resumes. What it submitted is summed up once a minute (``--report-seconds``), not a line a
job: the log ``make run`` shows stays readable. Tasks are short shell
loops that print their progress and exit when stopped (SIGTERM), so their logs show it.
"""

from __future__ import annotations

import logging
import random
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from scheduler.core.types import NON_TERMINAL_STATES, TaskState
from scheduler.foundation.errors import ServiceError
from scheduler.jobs.submit import submit_job
from scheduler.models import Task

# A demo task: prints a step a second for N seconds; SIGTERM (preemption, cancel) ends it.
TASK_SCRIPT = (
    'trap "echo \\"[$IRIS_TASK_ID] SIGTERM: stopping (attempt $IRIS_ATTEMPT, band $IRIS_BAND)\\"; exit 143" TERM; '
    'echo "[$IRIS_TASK_ID] attempt $IRIS_ATTEMPT running as $IRIS_BAND on $IRIS_WORKER"; '
    'i=0; while [ $i -lt "$1" ]; do i=$((i+1)); echo "step $i/$1"; sleep 1; done; echo done'
)
NON_TERMINAL_VALUES = sorted(s.value for s in NON_TERMINAL_STATES)


@dataclass(frozen=True)
class Kind:
    """One kind of demo job: who submits it, how, and how often relative to the others."""

    user: str
    prefix: str
    weight: int
    priority: str
    replicas: tuple[int, int]
    seconds: tuple[int, int]
    cpu: float = 1
    memory: str = "1Gi"
    device: dict | None = None
    group_by: str | None = None
    extra: dict = field(default_factory=dict)


MIX = (
    # bob: many small INTERACTIVE CPU jobs; past his 60 points they run as BATCH.
    Kind("bob", "notebook", 5, "interactive", (1, 3), (15, 40)),
    # carol (no tier, 100 points): BATCH sweeps that fill idle CPUs, and some INTERACTIVE work.
    Kind("carol", "sweep", 4, "batch", (2, 6), (20, 50)),
    Kind("carol", "eval", 2, "interactive", (1, 2), (10, 30), cpu=2, memory="2Gi"),
    # alice: BATCH work on single TPU hosts, and a four-host INTERACTIVE gang that evicts it.
    Kind(
        "alice",
        "tpu-probe",
        2,
        "batch",
        (1, 2),
        (30, 60),
        cpu=2,
        memory="4Gi",
        device={"type": "tpu", "variant": "v5p-8", "count": 4},
    ),
    Kind(
        "alice",
        "train",
        1,
        "interactive",
        (4, 4),
        (30, 45),
        cpu=4,
        memory="8Gi",
        device={"type": "tpu", "variant": "v5p-8", "count": 4},
        group_by="tpu-name",
    ),
    # admin: PRODUCTION serving jobs that preempt lower bands on the CPU hosts.
    Kind("admin", "serve", 1, "production", (1, 1), (15, 30), cpu=4, memory="4Gi"),
)


def job_request(kind: Kind, rng: random.Random) -> dict:
    seconds = rng.randint(*kind.seconds)
    request = {
        "name": f"{kind.prefix}-{uuid.uuid4().hex[:6]}",
        "priority": kind.priority,
        "replicas": rng.randint(*kind.replicas),
        "cpu": kind.cpu,
        "memory": kind.memory,
        "command": ["sh", "-c", TASK_SCRIPT, "demo-task", str(seconds)],
        "max_retries_preemption": 100,
        **kind.extra,
    }
    if kind.device:
        request["device"] = kind.device
    if kind.group_by:
        request["group_by"] = kind.group_by
    return request


class Command(BaseCommand):
    help = "Submit a mix of demo jobs (bands, sizes, gangs) so downgrades and preemptions happen."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=3.0, help="seconds between submissions")
        parser.add_argument("--max-pending", type=int, default=30, help="pause while more tasks wait")
        parser.add_argument("--count", type=int, default=0, help="submit this many jobs, then exit (0: forever)")
        parser.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable mix")
        parser.add_argument(
            "--report-seconds",
            type=float,
            default=60.0,
            help="sum up what was submitted this often (0: a line per job)",
        )

    def handle(self, *args, **options):
        users = {u.username: u for u in get_user_model().objects.filter(username__in={k.user for k in MIX})}
        missing = sorted({k.user for k in MIX} - set(users))
        if missing:
            raise CommandError(f"demo users missing ({', '.join(missing)}): run `python manage.py seed_demo` first")
        rng = random.Random(options["seed"])
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        submitted, paused = 0, False
        self.report_seconds = options["report_seconds"]
        self.since, self.recent = time.monotonic(), Counter()
        submit_log = logging.getLogger("scheduler.jobs.submit")
        previous_level = submit_log.level
        if self.report_seconds:
            # The summary says what was submitted; the use case's line per job would repeat it.
            submit_log.setLevel(logging.WARNING)
        limit = options["max_pending"]
        resume_at = limit * 2 // 3  # not at the limit itself: it would pause and resume every few seconds
        self.stdout.write(f"demo load: a job every {options['interval']:g}s (Ctrl-C to stop)")
        try:
            while not stopping and (not options["count"] or submitted < options["count"]):
                pending = Task.objects.filter(state=TaskState.PENDING.value).count()
                if pending > limit and not paused:
                    paused = True
                    self.stdout.write(
                        f"demo load: pausing: {pending:,} tasks pending, more than --max-pending {limit:,}; "
                        f"resuming when at most {resume_at:,} wait"
                    )
                elif pending <= resume_at and paused:
                    paused = False
                    self.stdout.write(f"demo load: resuming: {pending:,} tasks pending")
                if not paused:
                    kind = self.pick(rng, users)
                    if kind is not None and self.submit(users[kind.user], kind, rng):
                        submitted += 1
                self.report(force=False)
                time.sleep(options["interval"])
        except KeyboardInterrupt:
            pass
        finally:
            submit_log.setLevel(previous_level)
        self.report(force=True)
        self.stdout.write(f"demo load: submitted {submitted} job(s)")

    def report(self, *, force: bool) -> None:
        """Once every ``--report-seconds``: the jobs and tasks submitted since the last report."""
        if not self.recent or (not force and time.monotonic() - self.since < self.report_seconds):
            return
        jobs, tasks = self.recent.pop("jobs"), self.recent.pop("tasks")
        users = ", ".join(f"{user} {n}" for user, n in sorted(self.recent.items()))
        self.stdout.write(
            f"demo load: submitted {jobs} job(s), {tasks} task(s) in the last "
            f"{time.monotonic() - self.since:.0f}s ({users})"
        )
        self.since, self.recent = time.monotonic(), Counter()

    def pick(self, rng: random.Random, users) -> Kind | None:
        kind = rng.choices(MIX, weights=[k.weight for k in MIX])[0]
        if (
            kind.group_by
            and Task.objects.filter(
                job__user=kind.user, job__group_by=kind.group_by, state__in=NON_TERMINAL_VALUES
            ).exists()
        ):
            return None  # one gang at a time is enough to watch
        return kind

    def submit(self, user, kind: Kind, rng: random.Random) -> bool:
        request = job_request(kind, rng)
        try:
            job = submit_job(user, request)
        except ServiceError as exc:
            self.stdout.write(f"demo load: {user.username} {request['name']} refused: {exc.message}")
            return False
        if not self.report_seconds:
            gang = f", gang by {kind.group_by}" if kind.group_by else ""
            self.stdout.write(
                f"demo load: {user.username} submitted {job.name} ({kind.priority}, {job.replicas} task(s){gang})"
            )
        self.recent.update({"jobs": 1, "tasks": job.replicas, user.username: 1})
        return True
