"""``iris`` against a live test server: every command, its output, its exit code, its errors."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from scheduler.core.bands import Band
from scheduler.models import AuditEntry, Job, Task, UpliftGrant, UserBudget, Worker
from tests.cli.conftest import PASSWORD

GIB = 1 << 30


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- login and credentials ---------------------------------------------------------------------------


def test_login_saves_a_token_only_the_owner_can_read(iris, home):
    result = iris.login("alice")

    assert "Logged in" in result.out and "alice (researcher)" in result.out
    path = home / ".config" / "iris" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved["server"] == iris.server
    assert saved["username"] == "alice"
    assert saved["token"]
    assert iris("whoami").out.splitlines()[0].split() == ["user", "alice"]


def test_login_tightens_an_existing_credentials_file(iris, home):
    path = home / ".config" / "iris" / "credentials.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    path.chmod(0o644)

    iris.login("alice")

    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_login_with_a_wrong_password_shows_the_server_error_and_saves_nothing(iris, home):
    result = iris("login", "--server", iris.server, "--username", "alice", "--password", "wrong")

    assert result.code == 1
    assert result.err.startswith("UNAUTHENTICATED: wrong username or password")
    assert not (home / ".config" / "iris" / "credentials.json").exists()


def test_login_prompts_for_what_flags_do_not_give(iris, monkeypatch):
    answers = iter([iris.server, "alice"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    monkeypatch.setattr("getpass.getpass", lambda prompt: PASSWORD)

    assert iris("login").code == 0
    assert "alice" in iris("whoami").out


def test_iris_token_and_server_override_the_saved_login(iris):
    iris.login("alice")
    iris.use_token("bob")

    assert iris("--json", "whoami").json()["username"] == "bob"


def test_the_saved_token_is_not_sent_to_another_server(iris, monkeypatch):
    iris.login("alice")
    monkeypatch.setenv("IRIS_SERVER", f"http://127.0.0.1:{free_port()}")

    result = iris("whoami")

    assert result.code == 1
    assert "not logged in" in result.err


def test_logout_forgets_the_token(iris, home):
    iris.login("alice")

    assert iris("logout").code == 0
    result = iris("job", "list")
    assert result.code == 1
    assert result.err.startswith("UNAUTHENTICATED: not logged in: run `iris login`")


def test_a_revoked_token_says_to_log_in_again(iris, monkeypatch):
    monkeypatch.setenv("IRIS_SERVER", iris.server)
    monkeypatch.setenv("IRIS_TOKEN", "0" * 40)

    result = iris("job", "list")

    assert result.code == 1
    assert result.err.startswith("UNAUTHENTICATED: ")
    assert "iris login" in result.err


def test_an_unreachable_server_is_named_clearly(iris, monkeypatch):
    server = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("IRIS_SERVER", server)
    monkeypatch.setenv("IRIS_TOKEN", "x")

    result = iris("job", "list")

    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(f"UNAVAILABLE: cannot reach the Iris server at {server}")
    assert "Traceback" not in result.err


def test_a_server_that_is_not_iris_is_reported_as_such(iris, monkeypatch):
    monkeypatch.setenv("IRIS_SERVER", iris.server + "/not-the-api")
    monkeypatch.setenv("IRIS_TOKEN", "x")

    result = iris("job", "list")

    assert result.code == 1
    assert result.err.startswith("HTTP_ERROR: HTTP 404")
    assert "not an Iris API answer" in result.err


# --- job run -------------------------------------------------------------------------------------------


def test_job_run_submits_resources_command_and_argv(iris):
    iris.use_token("alice")
    argv = [
        "job",
        "run",
        "--name",
        "train",
        "--replicas",
        "2",
        "--cpu",
        "2",
        "--memory",
        "4Gi",
        "--gpu",
        "h100:8",
        "--group-by",
        "tpu-name",
        "--max-retries-failure",
        "3",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    ]

    result = iris(*argv)

    assert result.code == 0, result.err
    assert result.out.startswith("Submitted /alice/train: INTERACTIVE, 2 task(s), pending.")
    job = Job.objects.get(name="/alice/train")
    assert (job.user, job.band, job.replicas) == ("alice", Band.INTERACTIVE, 2)
    assert (job.cpu_millicores, job.memory_bytes) == (2000, 4 * GIB)
    assert (job.device_type, job.device_variant, job.device_count) == ("gpu", "h100", 8)
    assert job.group_by == "tpu-name"
    assert job.max_retries_failure == 3
    assert job.command == ["python", "train.py", "--lr", "3e-4"]
    assert job.submission_argv == ["iris", *argv]


def test_job_run_names_the_job_after_the_program_and_the_time(iris):
    iris.use_token("alice")

    job = iris("--json", "job", "run", "--", "/usr/bin/python3", "eval.py").json()

    assert job["id"].startswith("/alice/python3-")
    assert job["command"] == ["/usr/bin/python3", "eval.py"]


def test_job_run_above_max_band_is_refused_with_the_servers_message(iris):
    iris.use_token("bob")  # bob's budget row allows BATCH only

    result = iris("job", "run", "--name", "sweep", "--", "python", "sweep.py")

    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(
        "PERMISSION_DENIED: Budget identity 'bob' cannot submit INTERACTIVE jobs (max band: BATCH)."
    )
    assert "--priority batch" in result.err
    assert not Job.objects.exists()


def test_job_run_at_the_allowed_band_is_accepted(iris):
    iris.use_token("bob")

    result = iris("job", "run", "--priority", "batch", "--name", "sweep", "--", "python", "sweep.py")

    assert result.code == 0, result.err
    assert Job.objects.get(name="/bob/sweep").band == Band.BATCH


def test_researchers_cannot_submit_production(iris):
    iris.use_token("alice")

    result = iris("job", "run", "--priority", "production", "--", "x")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: priority: only admins may submit PRODUCTION jobs")


def test_system_jobs_need_a_reason_and_keep_it_for_audit(iris):
    iris.use_token("ada")

    refused = iris("job", "run", "--priority", "system", "--system-reason", "superhero", "--", "x")
    accepted = iris(
        "job", "run", "--priority", "system", "--system-reason", "hero run; commit=abc", "--name", "hero", "--", "x"
    )

    assert refused.code == 1
    assert refused.err.startswith("INVALID_ARGUMENT: system_reason: ")
    assert accepted.code == 0, accepted.err
    job = Job.objects.get(name="/ada/hero")
    assert job.band == Band.SYSTEM
    assert "hero run; commit=abc" in job.submission_argv


def test_a_child_job_runs_under_its_parent(iris):
    iris.use_token("alice")
    iris("job", "run", "--name", "train", "--", "x")

    result = iris("--json", "job", "run", "--parent", "/alice/train", "--name", "eval", "--", "y")

    assert result.code == 0, result.err
    assert result.json()["id"] == "/alice/train/eval"
    assert result.json()["parent"] == "/alice/train"


def test_job_run_reports_a_field_the_server_rejects(iris):
    iris.use_token("alice")

    result = iris("job", "run", "--memory", "lots", "--", "x")

    assert result.code == 1
    assert result.err.startswith("INVALID_ARGUMENT: memory: ")


def test_a_taken_job_name_is_a_failed_precondition(iris):
    iris.use_token("alice")
    iris("job", "run", "--name", "train", "--", "x")

    result = iris("job", "run", "--name", "train", "--", "x")

    assert result.code == 1
    assert result.err.startswith("FAILED_PRECONDITION: job /alice/train already exists")


def test_job_run_sends_hard_and_soft_constraints(iris):
    iris.use_token("alice")

    result = iris(
        "job", "run", "--name", "pinned", "--constraint", "zone=us-a,us-b", "--prefer", "pool=spot", "--", "x"
    )

    assert result.code == 0, result.err
    assert Job.objects.get(name="/alice/pinned").constraints == [
        {"key": "zone", "op": "in", "value": ["us-a", "us-b"], "soft": False},
        {"key": "pool", "op": "eq", "value": "spot", "soft": True},
    ]


# --- job list, show, explain, cancel ------------------------------------------------------------------


@pytest.fixture
def some_jobs(iris):
    iris.use_token("alice")
    iris("job", "run", "--name", "train", "--replicas", "2", "--", "x")
    iris.use_token("bob")
    iris("job", "run", "--priority", "batch", "--name", "sweep", "--", "y")
    return iris


def test_job_list_shows_a_table_and_filters(some_jobs):
    iris = some_jobs

    everything = iris("job", "list")
    alices = iris("job", "list", "--user", "alice")
    batch = iris("--json", "job", "list", "--band", "batch")

    assert everything.code == 0
    header, *rows = everything.out.splitlines()
    assert header.split()[:5] == ["JOB", "USER", "BAND", "EFFECTIVE", "STATE"]
    assert {row.split()[0] for row in rows} == {"/alice/train", "/bob/sweep"}
    assert [row.split()[0] for row in alices.out.splitlines()[1:]] == ["/alice/train"]
    assert [job["id"] for job in batch.json()["results"]] == ["/bob/sweep"]
    by_name = iris("job", "list", "--filter", "name=swe", "--sort=-name")
    assert by_name.code == 0, by_name.err
    assert [row.split()[0] for row in by_name.out.splitlines()[1:]] == ["/bob/sweep"]


def test_job_list_rejects_an_unknown_state_with_the_servers_message(some_jobs):
    result = some_jobs("job", "list", "--state", "sleeping")

    assert result.code == 1
    assert result.err.startswith("INVALID_ARGUMENT: state: ")


def test_job_show_prints_the_job_and_its_tasks(some_jobs):
    result = some_jobs("job", "show", "/alice/train")

    assert result.code == 0, result.err
    assert "command" in result.out and "Tasks:" in result.out
    task_rows = result.out.split("Tasks:\n")[1].splitlines()[1:]
    assert [row.split()[:2] for row in task_rows] == [["0", "pending"], ["1", "pending"]]


def test_job_show_prints_another_users_escape_sequences_as_text(iris):
    iris.use_token("bob")
    submitted = iris(
        "job", "run", "--priority", "batch", "--name", "loud", "--", "echo", "\x1b]0;pwned\x07\x1b[2J", "two\nlines"
    )
    assert submitted.code == 0, submitted.err
    iris.use_token("olivia")  # an operator reads every job

    result = iris("job", "show", "/bob/loud")

    assert result.code == 0, result.err
    assert "\x1b" not in result.out and "\x07" not in result.out
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in result.out and "two\\nlines" in result.out


def test_job_show_json_is_the_api_answer(some_jobs):
    job = some_jobs("--json", "job", "show", "alice/train").json()

    assert job["id"] == "/alice/train"
    assert [t["index"] for t in job["tasks"]] == [0, 1]


def test_job_show_of_a_missing_job_is_not_found(some_jobs):
    result = some_jobs("job", "show", "/alice/nope")

    assert result.code == 1
    assert result.err.startswith("NOT_FOUND: job /alice/nope does not exist")


def test_job_explain_gives_bands_budget_and_reason(some_jobs):
    iris = some_jobs
    iris.use_token("olivia")
    assert iris("tick").code == 0

    text = iris("job", "explain", "/alice/train")
    data = iris("job", "explain", "/alice/train", "--json").json()

    assert text.code == 0, text.err
    assert "requested band  INTERACTIVE" in text.out
    assert "effective band  INTERACTIVE" in text.out
    assert "spend / limit   0 / 1,000 (now)" in text.out  # points as the console shows them
    assert "What would change it:" in text.out
    assert data["requested_band"] == "interactive"
    assert {t["task"] for t in data["tasks"]} == {"/alice/train/0", "/alice/train/1"}


def test_an_over_budget_job_explains_its_downgrade(iris):
    UserBudget.objects.create(user_id="alice", budget_limit=1, max_band=Band.INTERACTIVE)
    Worker.objects.create(name="w1", cpu_millicores=64000, memory_bytes=256 * GIB)
    iris.use_token("alice")
    iris("job", "run", "--name", "big", "--cpu", "32", "--", "x")
    iris("job", "run", "--name", "next", "--", "y")
    iris.use_token("olivia")
    iris("tick")  # places /alice/big: alice is now over her limit of 1

    result = iris("job", "explain", "/alice/next")

    assert result.code == 0, result.err
    assert "effective band  BATCH (downgraded: " in result.out
    assert iris("--json", "job", "explain", "/alice/next").json()["downgrade"]["limit"] == 1
    # The budget page says it in the server's words (core.explain.Downgrade), not the CLI's.
    shown = iris("budget", "show", "alice")
    assert "downgrade     INTERACTIVE runs as BATCH: spend " in shown.out and "> limit 1" in shown.out
    tick = iris("--json", "budget", "show", "alice").json()["spend_tick"]
    assert re.search(rf"^spend +[\d,]+ \(as of tick {tick}\)$", shown.out, re.M), shown.out


def test_job_cancel_kills_the_job(some_jobs):
    iris = some_jobs
    iris.use_token("alice")

    result = iris("job", "cancel", "/alice/train")

    assert result.code == 0, result.err
    assert result.out.startswith("Cancelled /alice/train: 2 task(s) killed.")
    assert Job.objects.get(name="/alice/train").state == "killed"


def test_cancelling_someone_elses_job_is_refused(some_jobs):
    iris = some_jobs
    iris.use_token("bob")

    result = iris("job", "cancel", "/alice/train")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: ")
    assert Job.objects.get(name="/alice/train").state == "pending"


def test_cancelling_a_finished_job_is_a_failed_precondition(some_jobs):
    iris = some_jobs
    iris.use_token("alice")
    iris("job", "cancel", "/alice/train")

    result = iris("job", "cancel", "/alice/train")

    assert result.code == 1
    assert result.err.startswith("FAILED_PRECONDITION: ")


def test_job_cancel_by_filter_counts_first_and_needs_yes_outside_a_terminal(some_jobs):
    iris = some_jobs
    iris.use_token("alice")
    iris("job", "run", "--name", "eval", "--", "z")

    unconfirmed = iris("job", "cancel", "--filter", "user=alice", "--filter", "state=pending")
    assert unconfirmed.code == 1
    assert unconfirmed.err.startswith("NOT_CONFIRMED: this would cancel 2 job(s) and 3 task(s)")
    assert not Job.objects.filter(state="killed").exists()

    done = iris("job", "cancel", "--filter", "user=alice", "--filter", "state=pending", "--yes")
    assert done.code == 0, done.err
    assert done.out.startswith("Cancelled 2 job(s): 3 task(s) killed.")
    assert Job.objects.get(name="/bob/sweep").state == "pending"


def test_job_cancel_by_filter_refuses_others_jobs_and_bad_filters(some_jobs):
    iris = some_jobs
    iris.use_token("alice")

    others = iris("job", "cancel", "--filter", "state=pending", "--yes")
    typo = iris("job", "cancel", "--filter", "usr=alice", "--yes")
    shape = iris("job", "cancel", "--filter", "alice")

    assert others.code == 1 and others.err.startswith("PERMISSION_DENIED: ")
    assert typo.code == 1 and typo.err.startswith("INVALID_ARGUMENT: filter: unknown filter key(s) usr")
    assert shape.code == 2
    assert not Job.objects.filter(state="killed").exists()


# --- queue -----------------------------------------------------------------------------------------------


def test_queue_lists_pending_tasks_by_band_after_a_tick(some_jobs):
    iris = some_jobs
    iris.use_token("olivia")
    iris("tick")

    everything = iris("queue")
    batch = iris("queue", "--band", "batch", "--json").json()

    assert everything.code == 0, everything.err
    assert everything.out.startswith("As of tick ")
    rows = everything.out.splitlines()[2:5]
    assert [row.split()[:3] for row in rows] == [
        ["1", "INTERACTIVE", "/alice/train/0"],
        ["2", "INTERACTIVE", "/alice/train/1"],
        ["1", "BATCH", "/bob/sweep/0"],
    ]
    # No estimator has run: each row's ESTIMATED START is "-", and the table says why, once.
    start = everything.out.splitlines()[1].index("ESTIMATED START")
    assert [row[start:].split()[0] for row in rows] == ["-", "-", "-"]
    assert everything.out.splitlines()[5:] == [
        "No estimate (-) for 3 task(s): not estimated yet: the estimator has not run yet"
    ]
    assert [entry["task"] for entry in batch["results"]] == ["/bob/sweep/0"]


def test_queue_before_any_tick_says_so(some_jobs):
    result = some_jobs("queue")

    assert result.code == 0
    assert "No tick has explained the queue yet" in result.out


# --- budgets ---------------------------------------------------------------------------------------------


def test_budget_show_defaults_to_your_own(iris):
    iris.login("bob")

    result = iris("budget", "show")

    assert result.code == 0, result.err
    assert result.out.splitlines()[0].split() == ["user", "bob"]
    assert "max band      BATCH" in result.out
    assert "source        row" in result.out
    assert "downgrade" not in result.out  # the server sends none: bob runs as requested


def test_budget_show_of_another_user_and_json(iris):
    iris.use_token("bob")

    budget = iris("--json", "budget", "show", "alice").json()

    assert (budget["user"], budget["has_row"], budget["max_band"]) == ("alice", False, "interactive")


def test_budget_list_shows_every_budget(iris):
    iris.use_token("alice")

    result = iris("budget", "list")

    assert result.code == 0
    assert [row.split()[0] for row in result.out.splitlines()[1:]] == ["bob"]


def test_admins_set_budgets_and_the_change_is_audited(iris):
    iris.use_token("ada")

    result = iris("admin", "budget", "set", "alice", "--limit", "5000", "--max-band", "batch", "--reason", "tier 2")
    partial = iris("admin", "budget", "set", "alice", "--limit", "0", "--reason", "unlimited")

    assert result.code == 0, result.err
    assert partial.code == 0, partial.err
    row = UserBudget.objects.get(user_id="alice")
    assert (row.budget_limit, row.max_band) == (0, Band.BATCH)  # --max-band kept
    assert "budget limit  unlimited" in partial.out
    audit = iris("admin", "audit")
    assert "budget.set" in audit.out and "tier 2" in audit.out


def test_researchers_cannot_set_budgets(iris):
    iris.use_token("alice")

    result = iris("admin", "budget", "set", "alice", "--limit", "0", "--reason", "please")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: ")
    assert not UserBudget.objects.filter(user_id="alice").exists()


def test_admins_set_an_invalid_budget_and_see_why(iris):
    iris.use_token("ada")

    result = iris("admin", "budget", "set", "alice", "--limit", "5", "--reason", "")

    assert result.code == 1
    assert result.err.startswith("INVALID_ARGUMENT: reason")


# --- uplifts ---------------------------------------------------------------------------------------------


def test_an_approved_uplift_lets_bob_submit_interactive(iris):
    iris.use_token("bob")
    requested = iris(
        "--json", "uplift", "request", "--max-band", "interactive", "--reason", "paper deadline", "--duration", "2h"
    )
    assert requested.code == 0, requested.err
    grant_id = str(requested.json()["id"])
    assert requested.json()["duration_seconds"] == 7200

    iris.use_token("ada")
    approved = iris("admin", "uplift", "approve", grant_id, "--duration", "1h", "--note", "ok")
    assert approved.code == 0, approved.err
    assert approved.out.startswith("Approved.")

    iris.use_token("bob")
    listed = iris("--json", "uplift", "list").json()
    assert [(g["id"], g["state"], g["duration_seconds"]) for g in listed["results"]] == [
        (int(grant_id), "approved", 3600)
    ]
    assert iris("job", "run", "--name", "paper", "--", "x").code == 0
    assert Job.objects.get(name="/bob/paper").band == Band.INTERACTIVE


def test_uplift_list_is_a_table(iris):
    iris.use_token("alice")
    iris("uplift", "request", "--budget-limit", "0", "--reason", "eval sweep", "--duration", "1d")

    result = iris("uplift", "list")

    header, row = result.out.splitlines()
    assert header.split()[:3] == ["ID", "USER", "STATE"]
    assert row.split()[1:3] == ["alice", "requested"]
    assert "eval sweep" in row


def test_admins_deny_uplifts(iris):
    iris.use_token("alice")
    grant_id = str(
        iris("--json", "uplift", "request", "--budget-limit", "5000", "--reason", "r", "--duration", "1h").json()["id"]
    )
    iris.use_token("ada")

    result = iris("admin", "uplift", "deny", grant_id, "--note", "use batch")
    again = iris("admin", "uplift", "approve", grant_id)

    assert result.code == 0, result.err
    assert UpliftGrant.objects.get().state == "denied"
    assert again.code == 1
    assert again.err.startswith("FAILED_PRECONDITION: ")


def test_researchers_cannot_approve_uplifts(iris):
    iris.use_token("alice")
    grant_id = str(
        iris("--json", "uplift", "request", "--budget-limit", "5000", "--reason", "r", "--duration", "1h").json()["id"]
    )

    result = iris("admin", "uplift", "approve", grant_id)

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: ")
    assert UpliftGrant.objects.get().state == "requested"


def test_approving_a_missing_uplift_is_not_found(iris):
    iris.use_token("ada")

    result = iris("admin", "uplift", "approve", "999")

    assert result.code == 1
    assert result.err.startswith("NOT_FOUND: ")


# --- operator verbs --------------------------------------------------------------------------------------


def test_operators_run_a_tick(iris):
    iris.use_token("olivia")

    result = iris("tick")

    assert result.code == 0, result.err
    assert result.out.splitlines()[0].startswith("tick ")


def test_researchers_cannot_run_a_tick(iris):
    iris.use_token("alice")

    result = iris("tick")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: ")


def test_operators_list_and_drain_workers(iris):
    Worker.objects.create(
        name="gpu-07",
        cpu_millicores=8000,
        memory_bytes=64 * GIB,
        device_type="gpu",
        device_variant="h100",
        device_count=8,
    )
    iris.use_token("olivia")

    listed = iris("worker", "list")
    drained = iris("worker", "drain", "gpu-07")

    assert listed.code == 0
    assert listed.out.splitlines()[1].split()[:4] == ["gpu-07", "local", "yes", "no"]
    assert drained.code == 0, drained.err
    assert Worker.objects.get(name="gpu-07").draining


def test_worker_list_shows_one_page_and_all_follows_every_page(iris, monkeypatch):
    from iris_cli import commands

    Worker.objects.bulk_create([Worker(name=f"w{i:02}", cpu_millicores=1000, memory_bytes=GIB) for i in range(52)])
    iris.use_token("olivia")
    monkeypatch.setattr(commands, "WORKER_PAGE_SIZE", 20)  # three pages to follow

    first = iris("worker", "list")
    second = iris("worker", "list", "--page", "2")
    every = iris("worker", "list", "--all", "--json")

    assert first.code == 0 and "50 of 52 shown (page 1); next: --page 2" in first.out
    assert [line.split()[0] for line in second.out.splitlines()[1:3]] == ["w50", "w51"]
    assert every.code == 0, every.err
    assert [w["name"] for w in every.json()["results"]] == [f"w{i:02}" for i in range(52)]


def test_researchers_cannot_drain_workers(iris):
    Worker.objects.create(name="gpu-07", cpu_millicores=8000, memory_bytes=64 * GIB)
    iris.use_token("alice")

    result = iris("worker", "drain", "gpu-07")

    assert result.code == 1
    assert result.err.startswith("PERMISSION_DENIED: ")
    assert not Worker.objects.get(name="gpu-07").draining


def test_admins_read_the_audit_log_with_system_actors(iris):
    AuditEntry.objects.create(
        actor_name="cluster-config",
        action="budget.set",
        target="bob",
        before=None,
        after={"budget_limit": 0, "max_band": "batch"},
        reason="user_budgets[1]",
    )
    iris.use_token("ada")

    result = iris("admin", "audit")

    assert result.code == 0, result.err
    row = result.out.splitlines()[1]
    assert "cluster-config" in row and "max_band batch" in row


# --- the installed console script -------------------------------------------------------------------------


def test_the_console_script_runs_against_the_server(iris, home):
    iris.use_token("alice")
    script = Path(sys.executable).with_name("iris")
    env = {**os.environ, "HOME": str(home)}

    done = subprocess.run([str(script), "--json", "whoami"], capture_output=True, text=True, env=env, timeout=60)
    failed = subprocess.run(
        [str(script), "job", "run", "--priority", "production", "--", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["username"] == "alice"
    assert failed.returncode == 1
    assert failed.stderr.startswith("PERMISSION_DENIED: ")


# --- iris job submit -f (sweeps through POST jobs:batch) --------------------------------------------


def write_jsonl(path, jobs) -> str:
    path.write_text("".join(json.dumps(job) + "\n" for job in jobs) + "\n")
    return str(path)


def test_submit_from_a_jsonl_file_goes_in_chunks_and_prints_every_id(iris, tmp_path, settings):
    settings.MAX_JOBS_PER_BATCH = 2  # the server's limit is lower than the CLI's default: it re-chunks
    iris.use_token("alice")
    jobs = [{"name": f"sweep-{i}", "command": ["python", "train.py", f"--lr={i}"], "replicas": 2} for i in range(5)]

    result = iris("job", "submit", "-f", write_jsonl(tmp_path / "jobs.jsonl", jobs))

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Submitted 5 job(s):"
    assert lines[1:6] == [f"/alice/sweep-{i}" for i in range(5)]
    assert sorted(Job.objects.values_list("name", flat=True)) == [f"/alice/sweep-{i}" for i in range(5)]
    assert Task.objects.count() == 10


def test_a_refused_chunk_names_the_file_lines_and_stops(iris, tmp_path):
    iris.use_token("bob")  # bob's tier allows BATCH only
    jobs = [
        {"name": "a", "priority": "batch", "command": ["true"]},
        {"name": "b", "command": ["true"]},
        {"name": "c", "cpu": -1, "command": ["true"]},
    ]

    result = iris("job", "submit", "--batch-size", "1", "-f", write_jsonl(tmp_path / "jobs.jsonl", jobs))

    assert result.code == 1
    assert result.out.splitlines()[:2] == ["Submitted 1 job(s):", "/bob/a"]
    assert result.err.startswith("PERMISSION_DENIED: ")
    assert "jobs.jsonl line 2: jobs[0]: Budget identity 'bob' cannot submit INTERACTIVE" in result.err
    assert "nothing from" in result.err and "line 2 on was submitted" in result.err
    assert list(Job.objects.values_list("name", flat=True)) == ["/bob/a"]


def test_a_line_that_is_not_json_sends_nothing(iris, tmp_path):
    iris.use_token("alice")
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"name": "a", "command": ["true"]}\n{"name": \n')

    result = iris("job", "submit", "-f", str(path))

    assert result.code == 1
    assert "jobs.jsonl line 2: not JSON" in result.err
    assert not Job.objects.exists()


def test_the_console_script_submits_a_sweep_from_stdin(iris, home, tmp_path):
    iris.use_token("alice")
    script = Path(sys.executable).with_name("iris")
    env = {**os.environ, "HOME": str(home)}

    def lines(prefix: str) -> str:
        return "".join(json.dumps({"name": f"{prefix}{i}", "command": ["true"]}) + "\n" for i in range(3))

    jobs = lines("s")
    bad = json.dumps({"name": "bad", "replicas": 0, "command": ["true"]}) + "\n"

    done = subprocess.run(
        [str(script), "--json", "job", "submit", "-f", "-"],
        input=jobs,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    failed = subprocess.run(
        [str(script), "job", "submit", "-f", "-"],
        input=lines("t") + bad,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert [j["id"] for j in json.loads(done.stdout)["jobs"]] == ["/alice/s0", "/alice/s1", "/alice/s2"]
    assert failed.returncode == 1
    assert failed.stderr.startswith("INVALID_ARGUMENT: <stdin> line 4: jobs[3].replicas: ")
    assert Job.objects.count() == 3


def test_job_list_pages_by_cursor_and_all_follows_every_page(iris, monkeypatch):
    from iris_cli import commands
    from tests.personas import submit as submit_job_as

    alice = get_user_model().objects.get(username="alice")
    for i in range(7):
        submit_job_as(alice, f"j{i}")
    iris.use_token("alice")
    monkeypatch.setattr(commands, "JOB_PAGE_SIZE", 3)  # three pages to follow

    every = iris("--json", "job", "list", "--all", "--sort", "name")
    first = iris("job", "list", "--filter", "page_size=3", "--sort", "name")

    assert every.code == 0, every.err
    assert [j["id"] for j in every.json()["results"]] == [f"/alice/j{i}" for i in range(7)]
    assert first.code == 0, first.err
    cursor = re.search(r"3 of 7 shown; next: --cursor (\S+)", first.out).group(1)
    second = iris("job", "list", "--filter", "page_size=3", "--sort", "name", "--cursor", cursor)
    assert second.code == 0, second.err
    assert [line.split()[0] for line in second.out.splitlines()[1:4]] == ["/alice/j3", "/alice/j4", "/alice/j5"]


def test_admin_sees_an_uplifts_effect_before_approving_it(iris):
    """`iris admin uplift preview` shows which of bob's tasks change band and where they would
    stand; `approve` shows the same preview before its own answer."""
    from scheduler.models import UserBudget
    from scheduler.store import clock
    from scheduler.tick.run import run_tick
    from tests.personas import make_job, make_worker, run_tasks

    UserBudget.objects.update_or_create(user_id="bob", defaults={"budget_limit": 1, "max_band": int(Band.INTERACTIVE)})
    worker = make_worker("w-preview", cpu=4, memory_gib=16)
    run_tasks(make_job("/bob/run", cpu=3, memory_gib=1), worker)
    make_job("/bob/train", replicas=2, cpu=2, memory_gib=1)
    run_tick(clock.now_ms())
    iris.use_token("bob")
    grant_id = str(
        iris("--json", "uplift", "request", "--budget-limit", "0", "--reason", "r", "--duration", "1h").json()["id"]
    )

    iris.use_token("ada")
    preview = iris("admin", "uplift", "preview", grant_id)
    assert preview.code == 0, preview.err
    assert "tasks moving   2" in preview.out
    rows = [line.split() for line in preview.out.splitlines() if line.startswith("/bob/train/")]
    assert rows == [
        ["/bob/train/0", "BATCH", "1/2", "INTERACTIVE", "1/2"],
        ["/bob/train/1", "BATCH", "2/2", "INTERACTIVE", "2/2"],
    ]
    as_json = iris("--json", "admin", "uplift", "preview", grant_id).json()
    assert [m["position_after"] for m in as_json["tasks"]] == [1, 2]

    approved = iris("admin", "uplift", "approve", grant_id)
    assert approved.code == 0, approved.err
    assert approved.out.startswith("Before approving, the preview said:")
    assert "/bob/train/1" in approved.out and "Approved." in approved.out


def test_job_list_says_more_than_when_the_server_stopped_counting(iris, monkeypatch):
    from django.contrib.auth import get_user_model

    from scheduler.jobs import listing
    from tests.personas import submit as submit_job_as

    alice = get_user_model().objects.get(username="alice")
    for i in range(7):
        submit_job_as(alice, f"j{i}")
    iris.use_token("alice")
    monkeypatch.setattr(listing, "COUNT_LIMIT", 5)
    first = iris("job", "list", "--filter", "page_size=3", "--sort", "name")
    assert first.code == 0, first.err
    assert re.search(r"3 of more than 5 shown; next: --cursor \S+", first.out), first.out
