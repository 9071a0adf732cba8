"""Issue 28, on the API and the console form: units and warnings a newcomer meets on submitting."""

from __future__ import annotations

import pytest

from scheduler.budgets.writes import request_uplift
from scheduler.core.units import format_memory
from scheduler.foundation.errors import InvalidArgument
from scheduler.models import Job
from tests.api.test_submission import post, rejected
from tests.personas import make_worker
from tests.web.conftest import client_for

GIB = 1 << 30


def test_cpu_work_that_fits_only_an_accelerator_host_gets_no_warning(as_alice):
    """The scheduler places CPU work on any host, slice hosts included: so does the check."""
    make_worker("cpu-1", cpu=4, memory_gib=8)
    make_worker("slice-a-0", cpu=8, memory_gib=16, device=("tpu", "v5p-8", 4))
    answer = post(as_alice, {"name": "six", "cpu": 6})
    assert answer.status_code == 201
    assert answer.json()["warnings"] == []
    too_big = post(as_alice, {"name": "nine", "cpu": 9}).json()["warnings"]
    assert too_big == [
        "no registered worker could run a task of this job (9 cores, 1 GiB); largest host: "
        "8 cores, 16 GiB. It waits until a large enough worker registers."
    ]


def test_a_warning_states_memory_in_the_unit_it_was_asked_in(as_alice):
    make_worker("cpu-1", cpu=4, memory_gib=8)
    warning = post(as_alice, {"name": "m", "memory": "9G"}).json()["warnings"][0]
    assert "(1 core, 9 GB)" in warning


@pytest.mark.parametrize(
    ("n_bytes", "shown"),
    [
        (8_000_000_000, "8 GB"),
        (16 * GIB, "16 GiB"),
        (3 * GIB // 2, "1.5 GiB"),
        (512 << 20, "512 MiB"),
        (2_500_000_000, "2.5 GB"),
        (1 << 60, "1,024 PiB"),
        (16 * GIB - 8_000_000_000, "8.5 GiB"),
        (4096, "4 KiB"),
    ],
)
def test_sizes_read_back_in_the_unit_they_were_likely_typed_in(n_bytes, shown):
    assert format_memory(n_bytes) == shown


def test_cpu_zero_is_refused_by_the_api_and_the_console_form(as_alice, alice):
    body = rejected(post(as_alice, {"name": "cpu0", "cpu": 0}), 400, "INVALID_ARGUMENT", "cpu")
    assert "at least 0.001 cores" in body["message"]
    page = client_for(alice).post(
        "/jobs/new/",
        {"name": "cpu0", "replicas": "1", "cpu": "0", "memory": "1Gi", "device_type": "cpu", "command": "true"},
    )
    assert page.status_code == 400  # the form again, with the error
    assert "Ensure this value is greater than or equal to 0.001" in page.content.decode()
    assert not Job.objects.exists()


def test_a_worker_may_still_declare_zero_cores(as_olivia):
    answer = as_olivia.post("/api/v1/workers/", {"name": "w0", "cpu": 0, "memory": "1Gi"}, format="json")
    assert answer.status_code == 201, answer.content


def test_a_tpu_without_a_count_is_told_what_the_count_is(as_alice):
    body = rejected(
        post(as_alice, {"name": "t", "device": {"type": "tpu", "variant": "v5p-8"}}),
        400,
        "INVALID_ARGUMENT",
        "device.count",
    )
    assert "how many v5p-8 chips each task uses" in body["message"]
    assert "--tpu v5p-8:4" in body["message"]


def test_an_uplift_too_long_is_refused_in_days(alice):
    with pytest.raises(InvalidArgument) as refused:
        request_uplift(alice, max_band="interactive", reason="r", duration_seconds=100 * 86400)
    assert refused.value.message == "duration_seconds: must be at most 90d (7,776,000 seconds)"
    with pytest.raises(InvalidArgument) as short:
        request_uplift(alice, max_band="interactive", reason="r", duration_seconds=10)
    assert short.value.message == "duration_seconds: must be at least 1m (60 seconds)"
