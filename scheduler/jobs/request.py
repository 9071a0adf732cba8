"""The one job-request model: a submission body parsed and validated into a :class:`JobRequest`.

The API, the console's job and what-if forms and the API schema all validate through
:func:`parse_job_request`, so a field's rules and messages are written once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.bands import Band
from scheduler.core.types import ConstraintOp
from scheduler.errors import InvalidArgument
from scheduler.inputs import (
    DEFAULT_CPU_CORES,
    DEFAULT_MEMORY_BYTES,
    DeviceRequest,
    _attribute_value,
    check_text,
    parse_band,
    parse_cpu_millicores,
    parse_device,
    parse_int,
    parse_memory,
    parse_number,
    parse_segment,
    parse_text,
)
from scheduler.models import MAX_ID_LENGTH

MAX_CONSTRAINTS = 64

MAX_COMMAND_ITEMS = 1000


def parse_constraints(value: Any, name: str = "constraints") -> list[dict[str, Any]]:
    """``[{key, op: eq|ne|in|exists, value, soft}]``, normalised to the stored (snapshot) form."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidArgument("expected a list of {key, op, value, soft}", field=name)
    if len(value) > MAX_CONSTRAINTS:
        raise InvalidArgument(f"at most {MAX_CONSTRAINTS} constraints", field=name)
    result = []
    for i, raw in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(raw, Mapping):
            raise InvalidArgument("expected an object {key, op, value, soft}", field=where)
        key = parse_text(raw.get("key"), f"{where}.key", required=True, max_length=64)
        raw_op = raw.get("op", "eq")
        try:
            op = ConstraintOp(raw_op.lower() if isinstance(raw_op, str) else raw_op)
        except ValueError:
            raise InvalidArgument(f"unknown op {raw_op!r}; expected eq, ne, in or exists", field=f"{where}.op") from None
        soft = raw.get("soft", False)
        if not isinstance(soft, bool):
            raise InvalidArgument("expected true or false", field=f"{where}.soft")
        item: dict[str, Any] = {"key": key, "op": op.value}
        raw_value = raw.get("value")
        if op is ConstraintOp.EXISTS:
            if raw_value is not None:
                raise InvalidArgument("'exists' takes no value", field=f"{where}.value")
        elif op is ConstraintOp.IN:
            if not isinstance(raw_value, list | tuple) or not raw_value:
                raise InvalidArgument("'in' takes a non-empty list of strings", field=f"{where}.value")
            item["value"] = [_attribute_value(v, f"{where}.value[{j}]") for j, v in enumerate(raw_value)]
        else:
            if raw_value is None:
                raise InvalidArgument(f"'{op.value}' takes a string value", field=f"{where}.value")
            item["value"] = _attribute_value(raw_value, f"{where}.value")
        item["soft"] = soft
        result.append(item)
    return result


def parse_string_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InvalidArgument("expected a list of strings", field=name)
    if len(value) > MAX_COMMAND_ITEMS:
        raise InvalidArgument(f"at most {MAX_COMMAND_ITEMS} items", field=name)
    result = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidArgument("expected a string", field=f"{name}[{i}]")
        result.append(check_text(item, f"{name}[{i}]"))
    return result


def normalize_job_id(value: Any, name: str = "job") -> str:
    """``alice/train`` or ``/alice/train`` -> ``/alice/train``; NOT_FOUND-proof for lookups."""
    text = parse_text(value, name, required=True, max_length=MAX_ID_LENGTH)
    segments = text.strip("/").split("/")
    for segment in segments:
        parse_segment(segment, name)
    if len(segments) < 2:
        raise InvalidArgument("a job id has the form /<user>/<name>[/<child>...]", field=name)
    return "/" + "/".join(segments)


@dataclass(frozen=True)


class JobRequest:
    """A job submission as parsed from the caller; the fields mirror POST /api/v1/jobs/."""

    name: str
    parent: str | None = None
    priority: Band | None = None
    system_reason: str = ""
    replicas: int = 1
    cpu_millicores: int = DEFAULT_CPU_CORES * 1000
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    device: DeviceRequest = field(default_factory=DeviceRequest)
    group_by: str | None = None
    constraints: tuple[dict[str, Any], ...] = ()
    scheduling_timeout_seconds: float | None = None
    max_retries_preemption: int = 100
    max_retries_failure: int = 0
    command: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()


JOB_REQUEST_FIELDS = frozenset(
    {
        "name", "parent", "priority", "system_reason", "replicas", "cpu", "memory", "device", "group_by",
        "constraints", "scheduling_timeout_seconds", "max_retries_preemption", "max_retries_failure",
        "command", "argv",
    }
)


def parse_job_request(data: Any, *, ignore: Sequence[str] = ()) -> JobRequest:
    """Validate a submission body. Unknown fields are rejected so a typo never goes unnoticed."""
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a JSON object describing the job")
    unknown = sorted(set(data) - JOB_REQUEST_FIELDS - set(ignore))
    if unknown:
        raise InvalidArgument(f"unknown field; known fields are {', '.join(sorted(JOB_REQUEST_FIELDS))}", field=unknown[0])
    name = parse_text(data.get("name"), "name", required=True, max_length=MAX_ID_LENGTH)
    if ":" in name:
        raise InvalidArgument("job names may not contain ':'", field="name")
    parent = data.get("parent")
    priority = data.get("priority")
    group_by = parse_text(data.get("group_by"), "group_by", max_length=64) or None
    timeout = data.get("scheduling_timeout_seconds")
    return JobRequest(
        name=name,
        parent=normalize_job_id(parent, "parent") if parent not in (None, "") else None,
        priority=parse_band(priority, "priority") if priority not in (None, "") else None,
        system_reason=parse_text(data.get("system_reason"), "system_reason", max_length=500),
        replicas=parse_int(data.get("replicas"), "replicas", minimum=1, default=1),
        cpu_millicores=parse_cpu_millicores(data.get("cpu")),
        memory_bytes=parse_memory(data.get("memory")),
        device=parse_device(data.get("device")),
        group_by=group_by,
        constraints=tuple(parse_constraints(data.get("constraints"))),
        scheduling_timeout_seconds=(
            parse_number(timeout, "scheduling_timeout_seconds", minimum=1, maximum=365 * 24 * 3600, default=0)
            if timeout not in (None, "")
            else None
        ),
        max_retries_preemption=parse_int(data.get("max_retries_preemption"), "max_retries_preemption", default=100),
        max_retries_failure=parse_int(data.get("max_retries_failure"), "max_retries_failure", default=0),
        command=tuple(parse_string_list(data.get("command"), "command")),
        argv=tuple(parse_string_list(data.get("argv"), "argv")),
    )
