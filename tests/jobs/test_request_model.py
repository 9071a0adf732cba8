"""One job-request model: the API schema, the console form and what-if all describe the fields
:func:`scheduler.jobs.request.parse_job_request` accepts, and nothing else."""

from __future__ import annotations

import pytest

from scheduler.api.serializers import JobSubmitSerializer, WhatIfRequestSerializer
from scheduler.jobs.request import JOB_REQUEST_FIELDS, parse_job_request
from scheduler.views.forms import JobForm, WhatIfForm

FORM_DATA = {
    "name": "train",
    "priority": "batch",
    "replicas": "2",
    "cpu": "1.5",
    "memory": "2Gi",
    "device_type": "gpu",
    "device_variant": "h100",
    "device_count": "8",
    "group_by": "rack",
    "scheduling_timeout_seconds": "60",
    "command": "python train.py --steps 10",
}


def test_the_api_schema_describes_exactly_the_fields_the_request_model_accepts():
    assert set(JobSubmitSerializer().fields) == JOB_REQUEST_FIELDS


def test_the_what_if_schema_adds_only_the_user_to_ask_as():
    assert set(WhatIfRequestSerializer().fields) == JOB_REQUEST_FIELDS | {"user"}


def test_the_console_form_sends_a_body_the_request_model_accepts():
    form = JobForm(FORM_DATA)
    assert form.is_valid(), form.errors
    body = form.service_data()
    assert set(body) <= JOB_REQUEST_FIELDS
    request = parse_job_request(body)
    assert (request.name, request.replicas, request.cpu_millicores, request.device.count) == ("train", 2, 1500, 8)


def test_the_what_if_form_adds_only_the_user():
    form = WhatIfForm({**FORM_DATA, "user": "bob"})
    assert form.is_valid(), form.errors
    body = form.service_data()
    assert set(body) <= JOB_REQUEST_FIELDS | {"user"}
    assert parse_job_request(body, ignore=("user",)).name == "train"


@pytest.mark.parametrize(
    "command, field, message",
    [
        (["python", "a\x00b"], "command[1]", "NUL"),
        (["python", "\ud83d"], "command[1]", "Unicode"),
        (["\ud83d", "\ude00"], "command[0]", "Unicode"),  # two lone halves, one per item
        (["a\x00", 3], "command[0]", "NUL"),  # the first problem in order, not the first kind
        ([3, "a\x00"], "command[0]", "string"),
        (["x" * 200_000], "command[0]", "per item"),
    ],
)
def test_a_commands_first_bad_item_is_named_as_before(command, field, message):
    from scheduler.foundation.errors import InvalidArgument
    from scheduler.jobs.request import parse_job_request

    with pytest.raises(InvalidArgument) as raised:
        parse_job_request({"name": "x", "command": command})
    assert raised.value.details["field"] == field and message in raised.value.message


# The fields the submission turns into columns of its own making (the job id, its parent's
# key, the band after the rules, the deadline from the submission time, the audit argv).
SUBMISSION_DERIVED = {"name", "parent", "priority", "scheduling_timeout_seconds", "argv"}


def test_every_request_field_reaches_the_job_row():
    """A field added to :class:`JobRequest` lands in the row through ``job_columns`` (or the
    submission derives a column from it): changing any one field changes the columns."""
    import dataclasses

    from scheduler.models import Job

    base = parse_job_request({"name": "x", "command": ["true"]})
    changed = {
        "system_reason": "hero",
        "replicas": 3,
        "cpu_millicores": 2500,
        "memory_bytes": 3 << 30,
        "device": parse_job_request(
            {"name": "x", "command": ["t"], "device": {"type": "tpu", "variant": "v5p-8", "count": 4}}
        ).device,
        "group_by": "tpu-name",
        "constraints": ({"key": "zone", "op": "eq", "value": "a", "soft": False},),
        "max_retries_preemption": 7,
        "max_retries_failure": 2,
        "command": ("python", "train.py"),
    }
    fields = {f.name for f in dataclasses.fields(base)}
    assert set(changed) == fields - SUBMISSION_DERIVED, "a new JobRequest field: say here how it reaches the row"
    columns = base.job_columns()
    assert set(columns) <= {f.attname for f in Job._meta.concrete_fields}
    for name, value in changed.items():
        assert dataclasses.replace(base, **{name: value}).job_columns() != columns, name
