"""What a task asks of a worker, and whether a worker's attributes meet a constraint.

A request as one tuple of resources, a job's hard and soft constraints in a canonical order
(with the automatic device ones), the attributes every worker exposes for constraints, and the
one definition of a constraint's match (:func:`constraint_matches`; :func:`filter_workers` is the
same rule, one pass per operator). Placement, preemption, feasibility, estimates, the uplift
preview and the dispatcher all ask these questions the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.types import ANY_VARIANT, Constraint, ConstraintOp, DeviceType, JobSpec, Resources

# Attributes every worker exposes for constraints, derived from its device.
DEVICE_TYPE_KEY = "device-type"
DEVICE_VARIANT_KEY = "device-variant"


# ``DeviceType.value`` is a Python-level property; this is looked up once per worker.
_DEVICE_TYPE_VALUE = {t: t.value for t in DeviceType}


def worker_attributes(attributes: Mapping[str, str], device_type: DeviceType, variant: str | None) -> dict[str, str]:
    """A worker's attributes plus ``device-type`` and (for accelerators) ``device-variant``."""
    if variant is not None:
        return {**attributes, DEVICE_TYPE_KEY: _DEVICE_TYPE_VALUE[device_type], DEVICE_VARIANT_KEY: variant}
    attrs = {**attributes, DEVICE_TYPE_KEY: _DEVICE_TYPE_VALUE[device_type]}
    attrs.pop(DEVICE_VARIANT_KEY, None)
    return attrs


def request_tuple(resources: Resources) -> tuple[int, int, int, int]:
    """(cpu millicores, memory bytes, GPUs, TPU chips) of one task."""
    device = resources.device
    return (resources.cpu_millicores, resources.memory_bytes, device.gpu_count, device.tpu_count)


def hard_constraints(job: JobSpec) -> tuple[Constraint, ...]:
    """The job's hard constraints plus the automatic device ones, in a canonical order.

    An accelerator job gets ``device-type = <type>`` and, unless its variant is ``auto``,
    ``device-variant = <variant>``; an explicit hard constraint on either key replaces the
    automatic one (for example an ``in`` over several variants). CPU jobs get neither, so they
    may run on accelerator hosts.
    """
    explicit = [c for c in job.constraints if not c.soft]
    keys = {c.key for c in explicit}
    device = job.resources.device
    if device.type is not DeviceType.CPU:
        if DEVICE_TYPE_KEY not in keys:
            explicit.append(Constraint(DEVICE_TYPE_KEY, ConstraintOp.EQ, device.type.value))
        if device.variant and device.variant != ANY_VARIANT and DEVICE_VARIANT_KEY not in keys:
            explicit.append(Constraint(DEVICE_VARIANT_KEY, ConstraintOp.EQ, device.variant))
    return tuple(sorted(set(explicit), key=_constraint_order))


def soft_constraints(job: JobSpec) -> tuple[Constraint, ...]:
    return tuple(sorted({c for c in job.constraints if c.soft}, key=_constraint_order))


def _constraint_order(c: Constraint) -> tuple[str, str, str]:
    return (c.key, c.op.value, repr(c.value))


def filter_workers(workers: list[int], attrs: Sequence[Mapping[str, str]], c: Constraint) -> list[int]:
    """The workers of ``workers`` whose attributes satisfy ``c`` (same semantics as
    :func:`constraint_matches`, one specialised pass per operator)."""
    key, value, op = c.key, c.value, c.op
    if key == DEVICE_VARIANT_KEY and (value == ANY_VARIANT or (op is ConstraintOp.IN and ANY_VARIANT in value)):
        return [w for w in workers if constraint_matches(attrs[w], c)]
    if op is ConstraintOp.EQ:
        return [w for w in workers if attrs[w].get(key) == value]
    if op is ConstraintOp.NE:
        return [w for w in workers if attrs[w].get(key) != value]
    if op is ConstraintOp.IN:
        allowed = frozenset(value)
        return [w for w in workers if attrs[w].get(key) in allowed]
    return [w for w in workers if key in attrs[w]]


def constraint_matches(attrs: Mapping[str, str], c: Constraint) -> bool:
    """Whether a worker with ``attrs`` satisfies ``c``.

    ``ne`` holds when the attribute is missing. A ``device-variant`` constraint naming ``auto``
    matches any variant (but still needs an accelerator).
    """
    value = attrs.get(c.key)
    op = c.op
    if op is ConstraintOp.EQ:
        return value is not None and (value == c.value or (c.value == ANY_VARIANT and c.key == DEVICE_VARIANT_KEY))
    if op is ConstraintOp.NE:
        return value != c.value
    if op is ConstraintOp.IN:
        if value is None:
            return False
        return value in c.value or (ANY_VARIANT in c.value and c.key == DEVICE_VARIANT_KEY)
    return value is not None
