"""The one job-row mapper (``store/job_rows.py``): every reader that hands a job to the core gets
the same ``JobSpec`` from the same row, and no module outside the core and the mapper builds
``Resources`` from columns."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.core.bands import Band
from scheduler.core.types import Device, DeviceType, JobSpec
from scheduler.jobs.request import parse_job_request
from scheduler.jobs.submit import plan_submission
from scheduler.jobs.whatif import planned_job
from scheduler.models import Job
from scheduler.store.cluster_rows import read_cluster
from scheduler.store.job_rows import (
    JOB_SHAPE_FIELDS,
    JOB_SPEC_FIELDS,
    ResourceCache,
    job_shape_of,
    job_spec_fields,
    job_spec_from_row,
    resources_from_columns,
)
from tests.personas import GIB, make_user, make_worker, submit

ROOT = Path(__file__).resolve().parents[2]

# A job that uses every column the mapper reads: a parent, a GPU, a gang, hard and soft
# constraints, a deadline, both retry limits.
CHILD = {
    "parent": "/alice/train",
    "replicas": 2,
    "cpu": 4,
    "memory": "16Gi",
    "device": {"type": "gpu", "variant": "h100", "count": 2},
    "group_by": "tpu-name",
    "constraints": [
        {"key": "zone", "op": "in", "value": ["a", "b"]},
        {"key": "pool", "op": "eq", "value": "spot", "soft": True},
    ],
    "scheduling_timeout_seconds": 90,
    "max_retries_preemption": 3,
    "max_retries_failure": 2,
}


@pytest.fixture
def alice(db):
    user = make_user("alice")
    make_worker("gpu1", device=("gpu", "h100", 8), memory_gib=512)
    return user


def test_the_tick_and_a_values_list_read_the_same_spec(alice):
    submit(alice, "train")
    child = submit(alice, "eval", **CHILD)
    ticked = read_cluster().jobs[child.name]
    (row,) = Job.objects.filter(pk=child.pk).values_list(*JOB_SPEC_FIELDS)
    assert job_spec_from_row(row) == ticked
    assert ticked.parent == "/alice/train"
    assert ticked.resources.device == Device(DeviceType.GPU, "h100", 2)
    assert ticked.scheduling_deadline_ms == child.submitted_at_ms + 90_000
    assert (ticked.max_retries_preemption, ticked.max_retries_failure) == (3, 2)
    assert [c.key for c in ticked.constraints] == ["zone", "pool"]


def test_a_planned_submission_is_the_spec_the_tick_reads_back(alice):
    """What-if's planned job is the row submission writes, read by the same mapper."""
    submit(alice, "train")
    plan = plan_submission(alice, parse_job_request({"name": "eval", "command": ["true"], **CHILD}))
    planned, tasks = planned_job(plan, 1_800_000_000_000)
    child = submit(alice, "eval", **CHILD)
    ticked = read_cluster().jobs[child.name]
    shift = child.submitted_at_ms - 1_800_000_000_000
    assert planned == replace(
        ticked,
        submitted_at_ms=ticked.submitted_at_ms - shift,
        scheduling_deadline_ms=ticked.scheduling_deadline_ms - shift,
    )
    assert [t.id for t in tasks] == [f"{child.name}/0", f"{child.name}/1"]


def test_a_job_instance_maps_to_its_shape_without_another_query(alice):
    submit(alice, "train")
    child = submit(alice, "eval", **CHILD)
    ticked = read_cluster().jobs[child.name]
    job = Job.objects.only(*JOB_SHAPE_FIELDS).get(pk=child.pk)
    with CaptureQueriesContext(connection) as queries:
        shape = job_shape_of(job)
    assert len(queries) == 0
    defaults = JobSpec("x", "u", Band.BATCH, None, 0, 0)
    assert shape == replace(
        ticked,
        parent=None,
        scheduling_deadline_ms=None,
        max_retries_preemption=defaults.max_retries_preemption,
        max_retries_failure=defaults.max_retries_failure,
    )


def test_related_rows_use_the_same_columns_under_a_prefix():
    assert job_spec_fields("job__") == tuple(f"job__{f}" for f in JOB_SPEC_FIELDS)
    assert set(JOB_SHAPE_FIELDS) <= set(JOB_SPEC_FIELDS)


def test_cpu_resources_ignore_a_stored_variant_and_count():
    assert resources_from_columns(1000, GIB, "cpu", "junk", 3).device == Device()
    assert resources_from_columns(1000, GIB, "tpu", "", 4).device == Device(DeviceType.TPU, None, 4)


def test_rows_of_one_shape_share_one_resources_object():
    cache = ResourceCache()
    row = ("/a/j", "a", int(Band.BATCH), None, 1, 1, 1, 1000, GIB, "gpu", "h100", 1, None, [], None, 100, 0)
    first, second = job_spec_from_row(row, cache), job_spec_from_row(("/a/k", *row[1:]), cache)
    assert first.resources is second.resources


def test_no_module_outside_the_core_and_the_mapper_builds_resources():
    """A new resource column is read in one place: ``store/job_rows.py``."""
    builders = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "scheduler").rglob("*.py")
        if "core" not in path.relative_to(ROOT / "scheduler").parts[:1]
        and re.search(r"\bResources\(", path.read_text())
    }
    assert builders == {"scheduler/store/job_rows.py"}
