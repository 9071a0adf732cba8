"""``types.task_snapshot`` builds the same ``TaskSnapshot`` as the constructor."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.bands import Band
from scheduler.core.types import TaskSnapshot, TaskState, task_snapshot


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
