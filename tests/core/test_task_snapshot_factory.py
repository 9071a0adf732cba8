"""``types.task_snapshot``, ``job_spec``, ``task_after``, ``worker_spec`` and ``preemption`` build the same objects as the
constructors."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.bands import Band
from scheduler.core.types import (
    Assignment,
    AssignmentFiller,
    Constraint,
    ConstraintOp,
    Device,
    DeviceType,
    JobSpec,
    Preemption,
    Resources,
    TaskAfter,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
    job_spec,
    preemption,
    task_after,
    task_snapshot,
    worker_spec,
)


@settings(max_examples=200, deadline=None)
@given(
    index=st.integers(0, 10**6),
    state=st.sampled_from(list(TaskState)),
    worker=st.none() | st.text(max_size=8),
    band=st.none() | st.sampled_from(list(Band)),
    preemption_count=st.integers(0, 1000),
    unfinished=st.none() | st.text(max_size=8),
)
def test_the_fast_task_snapshot_is_the_constructors_task_snapshot(
    index, state, worker, band, preemption_count, unfinished
):
    values = (f"/a/j/{index}", "/a/j", index, state, worker, band, preemption_count, unfinished)
    made, constructed = task_snapshot(*values), TaskSnapshot(*values)
    assert [f.name for f in fields(TaskSnapshot)] == [
        "id",
        "job_id",
        "index",
        "state",
        "worker",
        "band",
        "preemption_count",
        "unfinished_attempt_worker",
    ]
    assert type(made) is TaskSnapshot
    assert made == constructed and hash(made) == hash(constructed) and repr(made) == repr(constructed)
    with pytest.raises(FrozenInstanceError):
        made.index = index + 1


@settings(max_examples=200, deadline=None)
@given(
    band=st.sampled_from(list(Band)),
    parent=st.none() | st.just("/a"),
    submitted=st.integers(0, 10**12),
    root_submitted=st.integers(0, 10**12),
    replicas=st.integers(1, 1000),
    cpu=st.integers(0, 10**6),
    gpus=st.integers(0, 8),
    group_by=st.none() | st.text(min_size=1, max_size=8),
    constraints=st.lists(st.text(min_size=1, max_size=4), max_size=2),
    deadline=st.none() | st.integers(0, 10**12),
    retries_preemption=st.integers(0, 1000),
    retries_failure=st.integers(0, 1000),
)
def test_the_fast_job_spec_is_the_constructors_job_spec(
    band,
    parent,
    submitted,
    root_submitted,
    replicas,
    cpu,
    gpus,
    group_by,
    constraints,
    deadline,
    retries_preemption,
    retries_failure,
):
    device = Device(DeviceType.GPU, "h100", gpus) if gpus else Device()
    values = (
        "/a/j",
        "a",
        band,
        parent,
        submitted,
        root_submitted,
        replicas,
        Resources(cpu, 2**30, device),
        group_by,
        tuple(Constraint(key, ConstraintOp.EQ, "x") for key in constraints),
        deadline,
        retries_preemption,
        retries_failure,
    )
    made, constructed = job_spec(*values), JobSpec(*values)
    assert [f.name for f in fields(JobSpec)] == [
        "id",
        "user",
        "band",
        "parent",
        "submitted_at_ms",
        "root_submitted_at_ms",
        "replicas",
        "resources",
        "group_by",
        "constraints",
        "scheduling_deadline_ms",
        "max_retries_preemption",
        "max_retries_failure",
    ]
    assert type(made) is JobSpec
    assert made == constructed and hash(made) == hash(constructed) and repr(made) == repr(constructed)
    with pytest.raises(FrozenInstanceError):
        made.replicas = replicas + 1


@settings(max_examples=200, deadline=None)
@given(
    state=st.sampled_from(list(TaskState)),
    worker=st.none() | st.text(max_size=8),
    band=st.none() | st.sampled_from(list(Band)),
    preemption_count=st.integers(0, 1000),
)
def test_the_fast_task_after_is_the_constructors_task_after(state, worker, band, preemption_count):
    made, constructed = (
        task_after(state, worker, band, preemption_count),
        TaskAfter(state, worker, band, preemption_count),
    )
    assert [f.name for f in fields(TaskAfter)] == ["state", "worker", "band", "preemption_count"]
    assert type(made) is TaskAfter
    assert made == constructed and hash(made) == hash(constructed) and repr(made) == repr(constructed)
    with pytest.raises(FrozenInstanceError):
        made.worker = "elsewhere"


@settings(max_examples=200, deadline=None)
@given(
    cpu=st.integers(0, 10**6),
    memory=st.integers(0, 2**40),
    gpus=st.integers(0, 8),
    attributes=st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=4), max_size=3),
    healthy=st.booleans(),
)
def test_the_fast_worker_spec_is_the_constructors_worker_spec(cpu, memory, gpus, attributes, healthy):
    device = Device(DeviceType.GPU, "h100", gpus) if gpus else Device()
    values = ("w-1", cpu, memory, device, attributes, healthy)
    made, constructed = worker_spec(*values), WorkerSpec(*values)
    assert [f.name for f in fields(WorkerSpec)] == [
        "id",
        "cpu_millicores",
        "memory_bytes",
        "device",
        "attributes",
        "healthy",
    ]
    assert type(made) is WorkerSpec
    # Not hashed: a worker's attributes are a dict.
    assert made == constructed and repr(made) == repr(constructed)
    with pytest.raises(FrozenInstanceError):
        made.healthy = not healthy


@settings(max_examples=100, deadline=None)
@given(task=st.text(max_size=8), worker=st.text(max_size=8), band=st.sampled_from(list(Band)))
def test_an_assignment_filled_through_its_filler_is_the_constructors_assignment(task, worker, band):
    # As decision._Outcome.assign builds the decision's assignments.
    made = object.__new__(AssignmentFiller)
    made.task = task
    made.worker = worker
    made.band = band
    made.__class__ = Assignment
    assert [f.name for f in fields(Assignment)] == ["task", "worker", "band"]
    assert made == Assignment(task, worker, band) and hash(made) == hash(Assignment(task, worker, band))
    assert repr(made) == repr(Assignment(task, worker, band))
    with pytest.raises(FrozenInstanceError):
        made.worker = "elsewhere"


@settings(max_examples=100, deadline=None)
@given(
    victim=st.text(max_size=8),
    preemptor=st.text(max_size=8),
    worker=st.text(max_size=8),
    victim_band=st.sampled_from(list(Band)),
    preemptor_band=st.sampled_from(list(Band)),
)
def test_the_fast_preemption_is_the_constructors_preemption(victim, preemptor, worker, victim_band, preemptor_band):
    values = (victim, preemptor, worker, victim_band, preemptor_band)
    made, constructed = preemption(*values), Preemption(*values)
    assert [f.name for f in fields(Preemption)] == ["victim", "preemptor", "worker", "victim_band", "preemptor_band"]
    assert type(made) is Preemption
    assert made == constructed and hash(made) == hash(constructed) and repr(made) == repr(constructed)
    with pytest.raises(FrozenInstanceError):
        made.worker = "elsewhere"
