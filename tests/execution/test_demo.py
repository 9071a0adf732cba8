"""The demo's setup commands: seed_demo (idempotent, writes each demo agent's own credential)
and demo_load."""

from __future__ import annotations

import io
import os
import pwd
import re
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from scheduler.execution.enrolment import worker_for_credential
from scheduler.management.commands.seed_demo import DEMO_WORKERS
from scheduler.models import Job, WorkerCredential
from tests.integration.subprocesses import ROOT

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent_and_writes_each_agent_its_own_credential_readable_only_by_its_owner(
    settings, tmp_path
):
    settings.DATA_DIR = tmp_path

    call_command("seed_demo", stdout=io.StringIO())
    first = {name: (tmp_path / "worker-credentials" / name).read_text().strip() for name in DEMO_WORKERS}
    call_command("seed_demo", stdout=io.StringIO())

    for name in DEMO_WORKERS:
        path = tmp_path / "worker-credentials" / name
        assert path.read_text().strip() == first[name]
        assert worker_for_credential(first[name]) == name
        assert path.stat().st_mode & 0o777 == 0o600
    assert len(set(first.values())) == len(DEMO_WORKERS)
    # The server keeps digests only.
    assert not WorkerCredential.objects.filter(digest__in=first.values()).exists()
    assert get_user_model().objects.filter(username__in=["admin", "ops", "alice", "bob", "carol"]).count() == 5


def test_seed_demo_mints_a_credential_again_when_its_file_no_longer_holds_a_valid_one(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    WorkerCredential.objects.filter(worker_name="cpu-1").delete()

    call_command("seed_demo", stdout=io.StringIO())

    assert worker_for_credential((tmp_path / "worker-credentials" / "cpu-1").read_text().strip()) == "cpu-1"


def test_every_agent_of_the_procfile_reads_the_credential_seed_demo_writes_for_its_own_name():
    agents = re.findall(
        r"iris_worker --name (\S+) .*--token-file \S+/worker-credentials/(\S+)", (ROOT / "Procfile").read_text()
    )

    assert sorted(agents) == sorted((name, name) for name in DEMO_WORKERS)


def test_demo_load_submits_a_mix_of_bands_sizes_and_gangs_through_the_submission_rules(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    out = io.StringIO()

    call_command("demo_load", count=12, interval=0, seed=3, max_pending=10_000, stdout=out)

    jobs = list(Job.objects.all())
    assert len(jobs) == 12
    assert {j.user for j in jobs} <= {"alice", "bob", "carol", "admin"}
    assert len({j.band for j in jobs}) >= 2
    assert all(j.command[:2] == ["sh", "-c"] for j in jobs)
    assert "demo load: submitted 12 job(s)" in out.getvalue()


def procfile_agents() -> dict[str, list[str]]:
    """Each demo agent's ``iris_worker`` arguments, as the Procfile starts it."""
    agents = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, _, command = line.partition(": ")
        words = command.split()
        if words[2:3] == ["iris_worker"]:
            agents[name] = words[3:]
    return agents


def test_make_run_started_as_root_runs_every_demo_agent_in_the_isolating_mode(settings):
    from scheduler.agent.process import DynamicIdentity
    from scheduler.management.commands.iris_worker import Command

    settings.AGENT_TASK_USER = settings.AGENT_TASK_IDENTITY = ""
    agents = procfile_agents()
    assert set(agents) == set(DEMO_WORKERS)
    for name, args in agents.items():
        options = vars(Command().create_parser("manage.py", "iris_worker").parse_args(args))
        assert isinstance(Command.identity(options, euid=0), DynamicIdentity), name
        assert not options["no_pid_namespace"], name


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the Makefile's line as root and as nobody")
def test_make_run_started_as_an_ordinary_user_says_once_that_tasks_are_not_isolated():
    makefile = (ROOT / "Makefile").read_text()
    run = makefile[makefile.index("\nrun: setup") : makefile.index("\ntest:")]
    [line] = [line for line in run.splitlines() if "not isolated" in line]
    shell = line.strip().lstrip("@").replace("$$", "$")
    nobody = pwd.getpwnam("nobody")

    as_root = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True)
    as_user = subprocess.run(
        ["sh", "-c", shell],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
    )

    assert as_root.stdout == ""
    assert as_user.stdout.count("tasks are not isolated from each other") == 1
    assert "demo agents run every task as nobody" in as_user.stdout


def test_the_printed_console_url_and_login_hint_follow_iris_port(tmp_path):
    """``IRIS_PORT=8500 make run`` served on 8500 but printed ``Console: http://127.0.0.1:8000/``."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "IRIS_PORT": "8500", "IRIS_DATA_DIR": str(tmp_path)}
    code = (
        "import django; django.setup(); from django.conf import settings; print(settings.CONSOLE_URL); "
        "from iris_cli.client import DEFAULT_SERVER; print(DEFAULT_SERVER)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**env, "DJANGO_SETTINGS_MODULE": "iris_web.settings"},
    ).stdout.split()
    assert out == ["http://127.0.0.1:8500/", "http://127.0.0.1:8500"]


def test_seed_demo_prints_the_console_url_and_the_login_command(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.CONSOLE_URL = "http://127.0.0.1:8500/"
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    assert "Console: http://127.0.0.1:8500/" in out.getvalue()
    assert "iris login --server http://127.0.0.1:8500" in out.getvalue()


def test_demo_load_says_when_it_pauses_and_resumes_and_sums_up_what_it_submitted(settings, tmp_path, monkeypatch):
    """It used to pause silently for about 70 s whenever more than 30 tasks were pending, and
    print a line per job (with the submission's own log line, two)."""
    from scheduler.management.commands import demo_load
    from scheduler.models import Task
    from tests.personas import make_job

    settings.DATA_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    make_job("/alice/backlog", replicas=11)
    # The scheduler places what waits while the load generator sleeps (after its first pause).
    sleeps = []

    def sleep(_):
        sleeps.append(1)
        if len(sleeps) == 1:
            Task.objects.filter(state="pending").update(state="running")

    monkeypatch.setattr(demo_load.time, "sleep", sleep)
    out = io.StringIO()

    call_command("demo_load", count=3, interval=0, seed=3, max_pending=10, stdout=out)

    lines = out.getvalue().splitlines()
    assert "demo load: pausing: 11 tasks pending, more than --max-pending 10; resuming when at most 6 wait" in lines
    assert "demo load: resuming: 0 tasks pending" in lines
    [summary] = [line for line in lines if "in the last" in line]
    assert summary.startswith("demo load: submitted 3 job(s), ")
    assert not [line for line in lines if " submitted /" in line]  # no line per job
