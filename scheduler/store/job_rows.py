"""The one mapping from job rows to the core's types: columns -> ``Resources``, a row -> ``JobSpec``.

Every reader that hands a job to the core (the tick's cluster rows, what-if, feasibility, the
start estimates, fairness, spend, the dispatcher's room check, START orders) fetches the columns
declared here and converts them with the functions here, so a submission field the policy reads
is added in one place: a column in :data:`JOB_SPEC_FIELDS` and its line in :func:`job_spec_from_row`.

- :data:`RESOURCE_FIELDS` and :func:`resources_from_columns`: what one task of a job (or a
  worker) asks for or offers, from its five resource columns; :func:`job_resources` the same
  from a ``Job`` instance.
- :data:`JOB_SPEC_FIELDS` and :func:`job_spec_from_row`: a job row (``values_list`` in that order,
  optionally under a relation prefix by :func:`job_spec_fields`, or the raw SQL columns of
  :data:`JOB_SPEC_SQL`) as a ``JobSpec``.
- :data:`JOB_SHAPE_FIELDS` and :func:`job_shape_of`: a ``Job`` instance's shape (what feasibility
  analyses), reading only those fields so a page of rows loaded with ``.only(*JOB_SHAPE_FIELDS)``
  costs no further query.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any

from scheduler.core.bands import Band
from scheduler.core.kueue import BACKEND_KEY
from scheduler.core.types import Constraint, ConstraintOp, Device, DeviceType, JobSpec, Resources, job_spec

# Plain dict look-ups: calling an Enum per row costs more than the rest of the row's work.
BANDS = {int(b): b for b in Band}
_DEVICE_TYPES = {t.value: t for t in DeviceType}

# A job's (or worker's) resource columns, in the order resources_from_columns takes them.
RESOURCE_FIELDS = ("cpu_millicores", "memory_bytes", "device_type", "device_variant", "device_count")

# A job row's columns, in the order job_spec_from_row takes them ("parent__name": the parent
# job's name, a join).
JOB_SPEC_FIELDS = (
    "name",
    "user",
    "band",
    "parent__name",
    "submitted_at_ms",
    "root_submitted_at_ms",
    "replicas",
    *RESOURCE_FIELDS,
    "group_by",
    "constraints",
    "scheduling_deadline_ms",
    "max_retries_preemption",
    "max_retries_failure",
)

# The fields of a Job instance job_shape_of reads (its parent is not: no join).
JOB_SHAPE_FIELDS = (
    "name",
    "user",
    "band",
    "submitted_at_ms",
    "root_submitted_at_ms",
    "replicas",
    *RESOURCE_FIELDS,
    "group_by",
    "constraints",
)


def job_spec_fields(prefix: str = "") -> tuple[str, ...]:
    """:data:`JOB_SPEC_FIELDS` under a relation, e.g. ``job_spec_fields("job__")`` for task rows."""
    return tuple(prefix + name for name in JOB_SPEC_FIELDS)


def resource_fields(prefix: str = "") -> tuple[str, ...]:
    """:data:`RESOURCE_FIELDS` under a relation, e.g. ``resource_fields("task__job__")``."""
    return tuple(prefix + name for name in RESOURCE_FIELDS)


def _sql_column(field: str) -> str:
    # The tick's raw select reads the job as ``j`` and its parent, joined, as ``p``.
    if field == "parent__name":
        return "p.name"
    return f'j."{field}"' if field == "user" else f"j.{field}"


# What job_shape_of puts in the columns it does not read: JobSpec's own defaults.
_SPEC_DEFAULTS = {f.name: f.default for f in dataclass_fields(JobSpec)}

# JOB_SPEC_FIELDS as the tick's raw SQL select names them (store/cluster_rows.py).
JOB_SPEC_SQL = ", ".join(_sql_column(field) for field in JOB_SPEC_FIELDS)


def device_from_columns(device_type: str, variant: str | None, count: int) -> Device:
    """A device from its three columns: CPU has no variant and count 0 whatever is stored."""
    kind = _DEVICE_TYPES[device_type]
    if kind is DeviceType.CPU:
        return Device()
    return Device(type=kind, variant=variant or None, count=count)


def resources_from_columns(cpu: int, memory: int, device_type: str, variant: str | None, count: int) -> Resources:
    """One task's request (or a worker's capacity) from the columns of :data:`RESOURCE_FIELDS`."""
    return Resources(cpu, memory, device_from_columns(device_type, variant, count))


def job_resources(job) -> Resources:
    """One task's request, from a ``Job`` instance (its :data:`RESOURCE_FIELDS`)."""
    return resources_from_columns(
        job.cpu_millicores, job.memory_bytes, job.device_type, job.device_variant, job.device_count
    )


def json_value(raw):
    """A JSON column's value, whether the driver parsed it or left it as text."""
    return json.loads(raw) if isinstance(raw, str) else raw


def constraints_from_json(raw: list[dict]) -> tuple[Constraint, ...]:
    """Stored constraints were validated at submission; this only converts them. The reserved
    ``backend`` key routes the job (``scheduler.core.kueue.route_job``) and is kept out of the
    core's constraints, which workers could never satisfy."""
    result = []
    for item in raw:
        if item.get("key") == BACKEND_KEY:
            continue
        value = item.get("value")
        if isinstance(value, list):
            value = tuple(value)
        result.append(
            Constraint(key=item["key"], op=ConstraintOp(item["op"]), value=value, soft=bool(item.get("soft")))
        )
    return tuple(result)


class ResourceCache(dict):
    """Resources shared between the rows of one shape: a cluster of 100,000 tasks has a handful
    of shapes, and one object per shape is less for every collection to rescan (and lets the
    core's identity checks, ``placement.ShapeBook``, hit)."""

    def get_resources(self, cpu: int, memory: int, device_type: str, variant: str | None, count: int) -> Resources:
        key = (cpu, memory, device_type, variant, count)
        resources = self.get(key)
        if resources is None:
            resources = self[key] = resources_from_columns(cpu, memory, device_type, variant, count)
        return resources


def job_spec_from_row(row: Sequence, resources: ResourceCache | None = None) -> JobSpec:
    """A job row, its columns in the order of :data:`JOB_SPEC_FIELDS`, as the core's ``JobSpec``.
    ``resources``: share ``Resources`` between rows of one shape."""
    (
        name,
        user,
        band,
        parent,
        submitted,
        root_submitted,
        replicas,
        cpu,
        mem,
        dtype,
        variant,
        count,
        group_by,
        constraints,
        deadline,
        retries_preemption,
        retries_failure,
    ) = row
    if resources is None:
        request = resources_from_columns(cpu, mem, dtype, variant, count)
    else:
        request = resources.get_resources(cpu, mem, dtype, variant, count)
    # Most jobs have none: their stored "[]" is not parsed (a burst reads tens of thousands).
    constraints = json_value(constraints) if constraints != "[]" else None
    # JobSpec(...) through its fast factory (every field given, in order; half the time).
    return job_spec(
        name,
        user,
        BANDS[band],
        parent,
        submitted,
        root_submitted,
        replicas,
        request,
        group_by or None,
        constraints_from_json(constraints) if constraints else (),
        deadline,
        retries_preemption,
        retries_failure,
    )


def job_spec_from_fields(fields: Mapping[str, Any], parent: str | None) -> JobSpec:
    """A job row not yet written (column values by attribute name, as ``jobs.submit`` writes
    them) as the ``JobSpec`` the tick will read back from it; ``parent`` the parent's name."""
    return job_spec_from_row(tuple(parent if name == "parent__name" else fields[name] for name in JOB_SPEC_FIELDS))


def job_shape_of(job) -> JobSpec:
    """A ``Job`` instance's shape as a ``JobSpec``: only :data:`JOB_SHAPE_FIELDS` are read (no
    parent, no deadline, default retries), which is all a shape analysis looks at."""
    row = [getattr(job, field) for field in JOB_SHAPE_FIELDS]
    name, user, band, submitted, root_submitted, replicas, cpu, mem, dtype, variant, count, group_by, cons = row
    return job_spec_from_row(
        (name, user, band, None, submitted, root_submitted, replicas, cpu, mem, dtype, variant, count)
        + (group_by, cons, None, _SPEC_DEFAULTS["max_retries_preemption"], _SPEC_DEFAULTS["max_retries_failure"])
    )
