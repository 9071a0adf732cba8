"""The CLI's side of issue 10's rough edges: an empty command refused, warnings shown, undrain,
and a budget for a new user only on purpose."""

from __future__ import annotations

from scheduler.models import AuditEntry, Job, UserBudget, Worker

GIB = 1 << 30


def test_an_empty_command_is_refused_with_the_field_named(iris):
    iris.use_token("alice")
    result = iris("job", "run", "--name", "x", "--", "")
    assert result.code == 1
    assert result.err.startswith("INVALID_ARGUMENT: command[0]: the program (the first item) must not be empty")
    assert not Job.objects.exists()


def test_job_run_prints_the_warning_of_a_job_no_worker_could_run(iris):
    Worker.objects.create(name="small", cpu_millicores=8000, memory_bytes=32 * GIB)
    iris.use_token("alice")
    result = iris("job", "run", "--name", "big", "--cpu", "1000", "--", "python", "train.py")
    assert result.code == 0, result.err
    assert (
        "Warning: no registered worker could run a task of this job (1,000 cores, 1 GiB); "
        "largest host: 8 cores, 32 GiB." in result.out
    )


def test_operators_undrain_a_drained_worker(iris):
    Worker.objects.create(name="gpu-07", cpu_millicores=8000, memory_bytes=64 * GIB, draining=True)
    iris.use_token("alice")
    assert iris("worker", "undrain", "gpu-07").code == 1
    iris.use_token("olivia")
    result = iris("worker", "undrain", "gpu-07")
    assert result.code == 0, result.err
    assert result.out.strip() == "Undrained gpu-07: it takes new tasks again."
    assert not Worker.objects.get(name="gpu-07").draining
    assert AuditEntry.objects.get(action="worker.undrain").actor_name == "olivia"


def test_admin_budget_set_for_a_new_user_needs_new_user(iris):
    iris.use_token("ada")
    refused = iris("admin", "budget", "set", "newcomer", "--limit", "10", "--reason", "r")
    assert refused.code == 1 and refused.err.startswith("NOT_FOUND: ")
    assert not UserBudget.objects.filter(user_id="newcomer").exists()
    created = iris("admin", "budget", "set", "newcomer", "--limit", "10", "--reason", "r", "--new-user")
    assert created.code == 0, created.err
    assert UserBudget.objects.get(user_id="newcomer").budget_limit == 10
