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
from scheduler.foundation.errors import InvalidArgument
from scheduler.foundation.inputs import (
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

# Values of one 'in' constraint: a list of hosts, zones or slices, not a database.
MAX_CONSTRAINT_VALUES = 256

MAX_COMMAND_ITEMS = 1000

# Characters in one command item: Linux refuses a single exec argument longer than
# MAX_ARG_STRLEN (128 KiB), so a longer one could never start.
MAX_COMMAND_ITEM_CHARS = 128 * 1024

# Characters in the whole command (or argv): well inside the kernel's 2 MiB ARG_MAX, which
# the environment shares.
MAX_COMMAND_CHARS = 256 * 1024


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
            raise InvalidArgument(
                f"unknown op {raw_op!r}; expected eq, ne, in or exists", field=f"{where}.op"
            ) from None
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
            if len(raw_value) > MAX_CONSTRAINT_VALUES:
                raise InvalidArgument(f"'in' takes at most {MAX_CONSTRAINT_VALUES} values", field=f"{where}.value")
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
    if _plain_strings(value):
        return list(value)
    # Something is wrong with an item: find the first, as the items are read in order.
    result = []
    total = 0
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidArgument("expected a string", field=f"{name}[{i}]")
        if len(item) > MAX_COMMAND_ITEM_CHARS:
            raise InvalidArgument(f"at most {MAX_COMMAND_ITEM_CHARS:,} characters per item", field=f"{name}[{i}]")
        total += len(item)
        if total > MAX_COMMAND_CHARS:
            raise InvalidArgument(f"at most {MAX_COMMAND_CHARS:,} characters in all", field=name)
        result.append(check_text(item, f"{name}[{i}]"))
    return result


def _plain_strings(items: Sequence[Any]) -> bool:
    """Whether every item is a string within the limits that :func:`check_text` accepts, checked
    over the whole list at once (a batch parses a thousand commands: one field name built per
    item was most of it). False sends the caller through the item-by-item loop, which raises
    the first problem in order, with its item's field."""
    total = 0
    for item in items:
        if type(item) is not str or len(item) > MAX_COMMAND_ITEM_CHARS:
            return False
        total += len(item)
    if total > MAX_COMMAND_CHARS:
        return False
    joined = "".join(items)
    if "\x00" in joined:
        return False
    try:
        joined.encode("utf-8")  # any surrogate code point fails, paired with a neighbour or not
    except UnicodeEncodeError:
        return False
    return True


def parse_command(value: Any, name: str = "command", *, required: bool) -> list[str]:
    """The command a task runs: a list of strings whose first item (the program) is not blank.
    Required for a submission (a task without one can only fail); what-if may leave it out."""
    command = parse_string_list(value, name)
    if required and not command:
        raise InvalidArgument('required: the command each task runs, e.g. ["python", "train.py"]', field=name)
    if command and not command[0].strip():
        raise InvalidArgument("the program (the first item) must not be empty", field=f"{name}[0]")
    return command


def parse_replicas(value: Any, name: str = "replicas") -> int:
    """Tasks in the job, at least 1. The upper bound is ``IRIS_MAX_REPLICAS_PER_JOB``, checked by
    the submission rules (RESOURCE_EXHAUSTED naming that limit, and what-if's answer says so);
    any integer is accepted here so no message ever names the column's range instead."""
    return parse_int(value, name, minimum=1, maximum=2**63 - 1, default=1, unit="tasks")


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

    def as_json(self) -> dict[str, Any]:
        """The request in the API's body form (``Job.request``): what was submitted, with the
        defaults it did not state filled in; ``argv`` is kept apart (``Job.submission_argv``)."""
        body: dict[str, Any] = {
            "name": self.name,
            "replicas": self.replicas,
            "cpu": self.cpu_millicores / 1000,
            "memory": self.memory_bytes,
            "device": self.device.as_json(),
            "command": list(self.command),
            "max_retries_preemption": self.max_retries_preemption,
            "max_retries_failure": self.max_retries_failure,
        }
        optional = {
            "parent": self.parent,
            "priority": self.priority.wire if self.priority is not None else None,
            "system_reason": self.system_reason or None,
            "group_by": self.group_by,
            "constraints": list(self.constraints) or None,
            "scheduling_timeout_seconds": self.scheduling_timeout_seconds,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body

    def job_columns(self) -> dict[str, Any]:
        """The ``Job`` columns this request fills as it was asked, by attribute name. The
        submission adds what follows from who asked and when (id, user, band, parent, route,
        times, the audit argv); a new field the job row keeps is one more line here."""
        return {
            "replicas": self.replicas,
            "cpu_millicores": self.cpu_millicores,
            "memory_bytes": self.memory_bytes,
            "device_type": self.device.type.value,
            "device_variant": self.device.variant,
            "device_count": self.device.count,
            "group_by": self.group_by,
            "constraints": list(self.constraints),
            "max_retries_preemption": self.max_retries_preemption,
            "max_retries_failure": self.max_retries_failure,
            "command": list(self.command),
            "request": self.as_json(),
            "system_reason": self.system_reason,
        }


JOB_REQUEST_FIELDS = frozenset(
    {
        "name",
        "parent",
        "priority",
        "system_reason",
        "replicas",
        "cpu",
        "memory",
        "device",
        "group_by",
        "constraints",
        "scheduling_timeout_seconds",
        "max_retries_preemption",
        "max_retries_failure",
        "command",
        "argv",
    }
)


def parse_job_request(data: Any, *, ignore: Sequence[str] = (), require_command: bool = True) -> JobRequest:
    """Validate a submission body. Unknown fields are rejected so a typo never goes unnoticed.
    ``require_command`` is false only for what-if, which runs nothing."""
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a JSON object describing the job")
    unknown = sorted(set(data) - JOB_REQUEST_FIELDS - set(ignore))
    if unknown:
        raise InvalidArgument(
            f"unknown field; known fields are {', '.join(sorted(JOB_REQUEST_FIELDS))}", field=unknown[0]
        )
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
        replicas=parse_replicas(data.get("replicas")),
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
        command=tuple(parse_command(data.get("command"), required=require_command)),
        argv=tuple(parse_string_list(data.get("argv"), "argv")),
    )
