"""Issue 28: a newcomer's first hour with ``iris``, run as the installed console script, as typed."""

from __future__ import annotations

import pytest

from scheduler.core.bands import Band
from scheduler.models import Job, UpliftGrant
from tests.personas import make_worker


@pytest.fixture
def alice(iris):
    iris.use_token("alice")
    return iris


def test_memory_without_a_unit_is_refused_with_the_size_it_probably_meant(alice):
    result = alice.run("job", "run", "--memory", "8", "--", "sleep", "1")
    assert result.code == 1
    assert result.err.startswith("INVALID_ARGUMENT: memory: 8 has no unit: did you mean 8Gi?")
    assert not Job.objects.exists()


def test_sizes_are_listed_in_the_unit_they_were_typed_in(alice):
    assert alice.run("job", "run", "--name", "dec", "--memory", "8G", "--", "true").code == 0
    assert alice.run("job", "run", "--name", "bin", "--memory", "16Gi", "--", "true").code == 0
    listing = alice.run("job", "list").out
    assert "1 cpu, 8 GB" in listing and "1 cpu, 16 GiB" in listing
    assert "Ki" not in listing
    assert "resources     1 cpu, 8 GB" in alice.run("job", "show", "/alice/dec").out


def test_can_it_ever_run_speaks_in_cores_and_gib(alice):
    make_worker("small", cpu=4, memory_gib=8)
    assert alice.run("job", "run", "--name", "huge", "--cpu", "1000", "--memory", "20Gi", "--", "true").code == 0
    explained = alice.run("job", "explain", "/alice/huge")
    assert explained.code == 0, explained.err
    assert "1,000 cores per task" in explained.out and "20 GiB per task" in explained.out
    assert "cpu >=" not in explained.out and "21474836480" not in explained.out


def test_a_duration_too_long_is_refused_in_days(alice):
    result = alice.run("uplift", "request", "--max-band", "interactive", "--reason", "r", "--duration", "100d")
    assert result.code == 1
    assert "must be at most 90d" in result.err and "7,776,000 seconds" in result.err
    assert not UpliftGrant.objects.exists()


def test_a_tpu_slice_type_without_a_count_says_what_to_add(alice):
    result = alice.run("job", "run", "--tpu", "v5p-8", "--", "true")
    assert result.code == 1
    assert "how many v5p-8 chips each task uses" in result.err and "--tpu v5p-8:4" in result.err


def test_cpu_zero_is_refused_in_the_servers_words(alice):
    result = alice.run("job", "run", "--cpu", "0", "--", "true")
    assert result.code == 2
    assert "cpu must be at least 0.001 cores (one millicore)" in result.err


def test_a_command_without_the_double_dash_gets_the_hint(alice):
    result = alice.run("job", "run", "python", "x.py")
    assert result.code == 2
    assert "unrecognized arguments: python x.py" in result.err
    assert "the job's command goes after --: iris job run [options] -- python x.py" in result.err


def test_a_misspelt_flag_gets_did_you_mean(alice):
    result = alice.run("job", "run", "--prioirty", "batch", "--", "true")
    assert result.code == 2
    assert "--prioirty: did you mean --priority?" in result.err


def test_band_names_are_taken_as_the_console_writes_them(alice):
    result = alice.run("job", "run", "--name", "loud", "--priority", "BATCH", "--", "true")
    assert result.code == 0, result.err
    assert Job.objects.get(name="/alice/loud").band == Band.BATCH
    refused = alice.run("job", "run", "--priority", "PRODUCTION", "--", "true")
    assert refused.code == 1 and refused.err.startswith("PERMISSION_DENIED: ")


def test_uplift_request_limit_suggests_budget_limit(alice):
    result = alice.run("uplift", "request", "--limit", "500", "--reason", "r", "--duration", "1d")
    assert result.code == 2
    assert "--limit: did you mean --budget-limit?" in result.err


def test_negative_budget_limits_and_sizes_are_explained(alice):
    limit = alice.run("uplift", "request", "--budget-limit", "-5", "--reason", "r", "--duration", "1d")
    assert limit.code == 2
    assert "a budget limit cannot be negative (-5)" in limit.err
    memory = alice.run("job", "run", "--memory", "-5Gi", "--", "true")
    assert memory.code == 2
    assert "memory cannot be negative (-5Gi)" in memory.err and "expected one argument" not in memory.err


def test_revoking_a_token_that_does_not_exist_says_so(alice):
    result = alice.run("token", "revoke", "nonexistent")
    assert result.code == 1
    assert result.err.startswith("NOT_FOUND: token nonexistent not found among your tokens")
    assert "no API endpoint" not in result.err


def test_iris_login_proposes_the_port_make_run_serves_on(iris, monkeypatch):
    monkeypatch.setenv("IRIS_PORT", "8500")
    result = iris.run_input("\n\n\n", "login")
    assert "Server [http://127.0.0.1:8500]:" in result.out


def test_bulk_cancel_says_descendants_only_when_it_killed_some(alice):
    assert alice.run("job", "run", "--name", "solo", "--", "true").code == 0
    assert alice.run("job", "run", "--name", "parent", "--", "true").code == 0
    assert alice.run("job", "run", "--name", "child", "--parent", "/alice/parent", "--", "true").code == 0
    solo = alice.run("job", "cancel", "/alice/solo", "/alice/solo", "--yes")
    assert solo.code == 0, solo.err
    assert solo.out.startswith("Cancelled 1 job(s): 1 task(s) killed.") and "descendant" not in solo.out
    tree = alice.run("job", "cancel", "/alice/parent", "/alice/parent", "--yes")
    assert tree.out.startswith("Cancelled 1 job(s) and 1 descendant job(s): 2 task(s) killed."), tree.out + tree.err
