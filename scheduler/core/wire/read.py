"""JSON -> core types: the snapshot ``simulate`` reads, validated field by field (see the package
for the format's defaults and rules)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from scheduler.core.bands import Band
from scheduler.core.types import (
    CPU_DEVICE,
    BudgetDefaults,
    BudgetSpec,
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Device,
    DeviceType,
    GroupSpec,
    JobSpec,
    Resources,
    SchedulerConfig,
    TaskState,
    WorkerSpec,
    _JobSpecFiller,
    worker_spec,
)
from scheduler.core.wire.columns import all_job_ids, as_parsed, by_id
from scheduler.core.wire.fields import (
    BANDS_BY_WIRE,
    SnapshotError,
    at_path,
    fail,
    join_path,
    json_band,
    json_bool,
    json_int,
    json_list,
    json_object,
    json_str,
    once_per_json_text,
)
from scheduler.core.wire.tasks import _tasks

# A job id: "/" then at least two non-empty segments (user, name, then any children).
JOB_ID = re.compile(r"^(?:/[^/\s]+){2,}$")
# A finished task the snapshot left out is written in this state (all finished states decide alike).
OMITTED_TASK_STATE = TaskState.SUCCEEDED
# Top-level keys besides the format's own: a free-text description for scenario files.
EXTRA_TOP_LEVEL = {"description"}


def snapshot_from_json(obj: Any) -> ClusterSnapshot:
    """Validate and convert a snapshot document (as a JSON parser returns it: dicts, lists,
    strings, numbers, booleans and None); raise :class:`SnapshotError` naming the path."""
    top = json_object(
        obj, "", {"now_ms", "config", "budgets", "workers", "jobs", "tasks", "scale_groups"} | EXTRA_TOP_LEVEL
    )
    if "now_ms" not in top:
        raise fail("now_ms", "required")
    now_ms = json_int(top["now_ms"], "now_ms")
    config = _config(top.get("config") or {}, "config")
    budgets = _budgets(top.get("budgets") or [], "budgets", config.budget_defaults)
    workers = _workers(top.get("workers") or [], "workers")
    worker_ids = {w.id for w in workers}
    jobs = _jobs(top.get("jobs") or [], "jobs")
    tasks = _tasks(top.get("tasks") or [], "tasks", jobs, worker_ids)
    scale_groups = _scale_groups(top.get("scale_groups") or [], "scale_groups")
    return ClusterSnapshot(
        now_ms=now_ms,
        config=config,
        budgets=budgets,
        workers=workers,
        jobs=jobs,
        tasks=tasks,
        scale_groups=scale_groups,
    )


SCALE_GROUP_KEYS = {"name", "variant", "zone", "min_slices", "max_slices", "hosts_per_slice", "chips_per_host"}


def _scale_groups(raw: Any, path: str) -> tuple[GroupSpec, ...]:
    groups = []
    seen: set[str] = set()
    for i, item in enumerate(json_list(raw, path)):
        where = f"{path}[{i}]"
        item = json_object(item, where, SCALE_GROUP_KEYS)
        for key in ("name", "variant", "zone"):
            if key not in item:
                raise fail(f"{where}.{key}", "required")
        name = json_str(item["name"], f"{where}.name")
        if name in seen:
            raise fail(f"{where}.name", f"duplicate scale group {name!r}")
        seen.add(name)
        base = GroupSpec(name, "", "")
        groups.append(
            GroupSpec(
                name=name,
                variant=json_str(item["variant"], f"{where}.variant"),
                zone=json_str(item["zone"], f"{where}.zone"),
                min_slices=json_int(item.get("min_slices", base.min_slices), f"{where}.min_slices"),
                max_slices=json_int(item.get("max_slices", base.max_slices), f"{where}.max_slices"),
                hosts_per_slice=json_int(
                    item.get("hosts_per_slice", base.hosts_per_slice), f"{where}.hosts_per_slice", minimum=1
                ),
                chips_per_host=json_int(
                    item.get("chips_per_host", base.chips_per_host), f"{where}.chips_per_host", minimum=1
                ),
            )
        )
    return tuple(groups)


def _config(raw: Any, path: str) -> SchedulerConfig:
    keys = {"max_tasks_per_job_per_cycle", "max_assignments_per_worker", "max_building_tasks", "budget_defaults"}
    raw = json_object(raw, path, keys)
    base = SchedulerConfig()
    defaults = base.budget_defaults
    if raw.get("budget_defaults") is not None:
        d = json_object(raw["budget_defaults"], f"{path}.budget_defaults", {"budget_limit", "max_band"})
        defaults = BudgetDefaults(
            budget_limit=json_int(d.get("budget_limit", defaults.budget_limit), path, "budget_defaults.budget_limit"),
            max_band=json_band(d.get("max_band", defaults.max_band.wire), path, "budget_defaults.max_band"),
        )
    return SchedulerConfig(
        max_tasks_per_job_per_cycle=json_int(
            raw.get("max_tasks_per_job_per_cycle", base.max_tasks_per_job_per_cycle),
            f"{path}.max_tasks_per_job_per_cycle",
        ),
        max_assignments_per_worker=json_int(
            raw.get("max_assignments_per_worker", base.max_assignments_per_worker), f"{path}.max_assignments_per_worker"
        ),
        max_building_tasks=json_int(raw.get("max_building_tasks", base.max_building_tasks), path, "max_building_tasks"),
        budget_defaults=defaults,
    )


def _budgets(raw: Any, path: str, defaults: BudgetDefaults) -> dict[str, BudgetSpec]:
    budgets: dict[str, BudgetSpec] = {}
    for i, item in enumerate(json_list(raw, path)):
        p = f"{path}[{i}]"
        item = json_object(item, p, {"user", "budget_limit", "max_band"})
        user = json_str(item.get("user"), p, "user")
        if user in budgets:
            raise fail(f"{p}.user", f"duplicate user {user!r}")
        if "budget_limit" not in item:
            raise fail(f"{p}.budget_limit", "required")
        budgets[user] = BudgetSpec(
            user=user,
            budget_limit=json_int(item["budget_limit"], p, "budget_limit"),
            max_band=json_band(item.get("max_band", defaults.max_band.wire), p, "max_band"),
        )
    return budgets


DEVICE_KEYS = frozenset({"type", "variant", "count"})
DEVICE_TYPES_BY_VALUE = {device_type.value: device_type for device_type in DeviceType}


def _device(raw: Any, path: str, key: str | None = None) -> Device:
    if not isinstance(raw, dict) or not raw.keys() <= DEVICE_KEYS:
        json_object(raw, at_path(path, key), DEVICE_KEYS)
    kind = raw.get("type")
    device_type = DEVICE_TYPES_BY_VALUE.get(kind) if isinstance(kind, str) else None
    if device_type is None:
        raise fail(join_path(at_path(path, key), "type"), "expected one of cpu|gpu|tpu")
    if device_type is DeviceType.CPU:
        if raw.get("variant") is not None or raw.get("count", 0) != 0:
            raise fail(at_path(path, key), "a cpu device has no variant and no count")
        return CPU_DEVICE
    path = at_path(path, key)
    variant = raw.get("variant")
    if variant is not None:
        variant = json_str(variant, path, "variant")
    if "count" not in raw:
        raise fail(f"{path}.count", "required for a gpu or tpu device")
    return Device(type=device_type, variant=variant, count=json_int(raw["count"], path, "count"))


# The fields the fast path reads, in the order it unpacks them (see ``columns.as_parsed``).
WORKER_FIELDS = ("id", "cpu_millicores", "memory_bytes", "attributes", "healthy", "device")
WORKER_KEYS = frozenset(WORKER_FIELDS)
# A worker's usual device, compared as it is (cheaper than its JSON text): a plain CPU.
CPU_DEVICE_JSON = {"type": "cpu"}
# The one type an attribute's value may have.
STR_TYPE = frozenset({str})


def _workers(raw: Any, path: str) -> tuple[WorkerSpec, ...]:
    workers = []
    seen: set[str] = set()
    # Devices by their JSON text (see once_per_json_text): workers repeat a few.
    devices: dict[bytes, Any] = {}
    shared: dict[object, object] = {}
    items = json_list(raw, path)
    k_id, k_cpu, k_memory, k_attributes, k_healthy, k_device = as_parsed(items, WORKER_FIELDS)
    # The allowed keys as the document spells them too: the check then matches them by identity.
    allowed = frozenset(as_parsed(items, WORKER_FIELDS))
    for i, item in enumerate(items):
        # The common shape is checked inline; anything else (and every error) takes _worker.
        worker = None
        if item.__class__ is dict and allowed.issuperset(item):
            get = item.get
            worker_id = get(k_id)
            cpu = get(k_cpu)
            memory = get(k_memory)
            attributes = get(k_attributes) or {}
            healthy = get(k_healthy, True)
            device = get(k_device)
            if (
                worker_id.__class__ is str
                and worker_id
                and worker_id not in seen
                and cpu.__class__ is int
                and cpu >= 0
                and memory.__class__ is int
                and memory >= 0
                and attributes.__class__ is dict
                and STR_TYPE.issuperset(map(type, attributes.values()))
                and (healthy is True or healthy is False)
            ):
                device = (
                    CPU_DEVICE
                    if device is None or device == CPU_DEVICE_JSON
                    else once_per_json_text(devices, device, _worker_device, shared)
                )
                if device is not None:
                    worker = worker_spec(worker_id, cpu, memory, device, dict(attributes), healthy)
        if worker is None:
            worker = _worker(item, f"{path}[{i}]", seen)
        seen.add(worker.id)
        workers.append(worker)
    return tuple(workers)


def _worker(item: Any, p: str, seen: AbstractSet[str]) -> WorkerSpec:
    """One worker, every field checked in order (the first problem raises)."""
    item = json_object(item, p, WORKER_KEYS)
    worker_id = json_str(item.get("id"), p, "id")
    if worker_id in seen:
        raise fail(f"{p}.id", f"duplicate worker id {worker_id!r}")
    for key in ("cpu_millicores", "memory_bytes"):
        if key not in item:
            raise fail(f"{p}.{key}", "required")
    attributes = item.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise fail(f"{p}.attributes", "expected an object of strings")
    for key, value in attributes.items():
        if not isinstance(value, str):
            raise fail(f"{p}.attributes.{key}", "expected a string")
    return WorkerSpec(
        id=worker_id,
        cpu_millicores=json_int(item["cpu_millicores"], p, "cpu_millicores"),
        memory_bytes=json_int(item["memory_bytes"], p, "memory_bytes"),
        device=_device(item["device"], f"{p}.device") if item.get("device") is not None else CPU_DEVICE,
        attributes=dict(attributes),
        healthy=json_bool(item.get("healthy", True), p, "healthy"),
    )


def _is_cpu_device(raw: Any) -> bool:
    """Whether ``raw`` is the plain ``{"type": "cpu"}`` (what ``_device`` reads as CPU_DEVICE)."""
    if raw.__class__ is not dict or not raw.keys() <= DEVICE_KEYS or raw.get("type") != "cpu":
        return False
    count = raw.get("count", 0)
    return raw["type"].__class__ is str and raw.get("variant") is None and count.__class__ is int and count == 0


def _worker_device(raw: Any, shared: dict[object, object]) -> Device | None:
    """A worker's ``device`` as the shared :class:`Device`, or None where ``_device`` raises."""
    if _is_cpu_device(raw):
        return CPU_DEVICE
    device = _device_or_none(raw)
    return None if device is None else shared.setdefault(device, device)


def _device_or_none(raw: Any) -> Device | None:
    """``_device(raw)``, or None where that raises (the caller then checks the item in order)."""
    try:
        return _device(raw, "")
    except SnapshotError:
        return None


def _constraint(raw: Any, path: str) -> Constraint:
    raw = json_object(raw, path, {"key", "op", "value", "soft"})
    key = json_str(raw.get("key"), path, "key")
    try:
        op = ConstraintOp(raw.get("op"))
    except ValueError:
        raise fail(f"{path}.op", "expected one of eq|ne|in|exists") from None
    value = raw.get("value")
    if op is ConstraintOp.EXISTS:
        if value is not None:
            raise fail(f"{path}.value", "'exists' takes no value")
    elif op is ConstraintOp.IN:
        items = json_list(value, path, "value")
        value = tuple(json_str(v, f"{path}.value[{j}]") for j, v in enumerate(items))
    elif not isinstance(value, str):
        raise fail(f"{path}.value", "expected a string")
    return Constraint(key=key, op=op, value=value, soft=json_bool(raw.get("soft", False), path, "soft"))


RESOURCE_KEYS = frozenset({"cpu_millicores", "memory_bytes", "device"})
# A job's request when it gives none.
DEFAULT_REQUEST = Resources()
# The fields the fast path reads, in the order it unpacks them (see ``columns.as_parsed``).
JOB_FIELDS = (
    "user",
    "band",
    "parent",
    "submitted_at_ms",
    "root_submitted_at_ms",
    "replicas",
    "resources",
    "coscheduling",
    "constraints",
    "scheduling_deadline_ms",
    "max_retries_preemption",
    "max_retries_failure",
)
JOB_KEYS = frozenset(("id", *JOB_FIELDS))


def _jobs(raw: Any, path: str) -> dict[str, JobSpec]:
    items = json_list(raw, path)
    # Usually every job is in its usual shape, checked a pass at a time over all of them.
    parsed = by_id(items, JOB_KEYS)
    if parsed is None or not all_job_ids(parsed.keys()):
        parsed = _jobs_by_id(items, path)

    bands: dict[str, Band] = {}

    def band_of(job_id: str) -> Band:
        band = bands.get(job_id)
        if band is None:
            i, item = parsed[job_id]
            p = f"{path}[{i}]"
            parent = _parent(job_id)
            if item.get("band") is not None:
                band = json_band(item["band"], p, "band")
            elif parent is None:
                band = Band.INTERACTIVE
            elif parent in parsed:
                band = band_of(parent)
            else:
                raise fail(f"{p}.band", f"omitted, and parent job {parent!r} is not in the snapshot to inherit from")
            bands[job_id] = band
        return band

    jobs: dict[str, JobSpec] = {}
    # Equal requests and constraint lists share one object, as in snapshots built from rows; the
    # core memoises per object identity first.
    shared: dict[object, object] = {}
    # Requests and constraint lists by their JSON text (see once_per_json_text).
    requests: dict[bytes, Any] = {}
    constraint_lists: dict[bytes, Any] = {}
    keys = as_parsed(items, JOB_FIELDS)
    for job_id, (i, item) in parsed.items():
        # The common shape is checked inline; anything else (and every error) takes _job, which
        # checks the fields in order.
        job = _job_fast(job_id, item, parsed, bands, shared, requests, constraint_lists, keys)
        if job is None:
            job = _job(job_id, i, item, path, parsed, band_of, shared)
        jobs[job_id] = job
    return jobs


def _jobs_by_id(items: list, path: str) -> dict[str, tuple[int, dict]]:
    """``{id: (position, item)}``, each job's shape and id checked in order (the first problem
    raises). Only a list with a problem (or, ``columns`` being strict, an id of a ``str``
    subclass or one ending in a newline, which ``JOB_ID``'s ``$`` allows) comes here."""
    parsed: dict[str, tuple[int, dict]] = {}
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        item = json_object(item, p, JOB_KEYS)
        job_id = json_str(item.get("id"), p, "id")
        if not JOB_ID.match(job_id):
            raise fail(f"{p}.id", "expected a job id like /user/name or /user/name/child")
        if job_id in parsed:
            raise fail(f"{p}.id", f"duplicate job id {job_id!r}")
        parsed[job_id] = (i, item)
    return parsed


def _job_fast(
    job_id: str,
    item: dict,
    parsed: Mapping[str, tuple[int, dict]],
    bands: dict[str, Band],
    shared: dict[object, object],
    requests: dict[bytes, Any],
    constraint_lists: dict[bytes, Any],
    keys: tuple[str, ...] = JOB_FIELDS,
) -> JobSpec | None:
    """The job of a well-formed ``item`` in its usual shape (a band given, or inherited from
    a parent already read; ``parent`` left out or equal to the one its id names), or None:
    then :func:`_job` decides, and raises any error. ``keys``: ``JOB_FIELDS`` as the document
    spells them (``columns.as_parsed``)."""
    (
        k_user,
        k_band,
        k_parent,
        k_submitted,
        k_root,
        k_replicas,
        k_resources,
        k_cosched,
        k_constraints,
        k_deadline,
        k_retries_preemption,
        k_retries_failure,
    ) = keys
    get = item.get
    submitted = get(k_submitted, 0)
    replicas = get(k_replicas, 1)
    user = get(k_user)
    deadline = get(k_deadline)
    retries_preemption = get(k_retries_preemption, 100)
    retries_failure = get(k_retries_failure, 0)
    if not (
        get(k_root) is None
        and submitted.__class__ is int
        and submitted >= 0
        and replicas.__class__ is int
        and replicas >= 1
        and (user is None or (user.__class__ is str and user))
        and (deadline is None or (deadline.__class__ is int and deadline >= 0))
        and retries_preemption.__class__ is int
        and retries_preemption >= 0
        and retries_failure.__class__ is int
        and retries_failure >= 0
    ):
        return None
    # A child's id has a third "/" (its parent's id then has two); a root's parent is None.
    if job_id.count("/") >= 3:
        parent = job_id.rpartition("/")[0]
        root = "/".join(job_id.split("/")[:3])
        root_item = parsed.get(root)
        root_submitted = submitted if root_item is None else root_item[1].get(k_submitted, 0)
        if root_submitted.__class__ is not int or root_submitted < 0:
            return None
    else:
        parent = None
        root_submitted = submitted
    if k_parent in item and item[k_parent] != parent:
        return None
    band = get(k_band)
    if band is None:
        band = Band.INTERACTIVE if parent is None else bands.get(parent)
    elif band.__class__ is str:
        band = BANDS_BY_WIRE.get(band)
    else:
        return None
    if band is None:
        return None
    resources = once_per_json_text(requests, get(k_resources), _request, shared)
    if resources is None:
        return None
    group_by = None
    cosched = get(k_cosched)
    if cosched is not None:
        if cosched.__class__ is not dict or cosched.keys() != {"group_by"}:
            return None
        group_by = cosched["group_by"]
        if group_by.__class__ is not str or not group_by:
            return None
    constraints = get(k_constraints)
    if not constraints:
        constraints = ()
    else:
        if constraints.__class__ is not list:
            return None
        constraints = once_per_json_text(constraint_lists, constraints, _constraints, shared)
        if constraints is None:
            return None
    bands.setdefault(job_id, band)
    # job_spec(...) inline (a call less a job): its filler's slots, then the class.
    job = _JobSpecFiller()
    job.id = job_id
    job.user = job_id[1 : job_id.index("/", 1)] if user is None else user
    job.band = band
    job.parent = parent
    job.submitted_at_ms = submitted
    job.root_submitted_at_ms = root_submitted
    job.replicas = replicas
    job.resources = resources
    job.group_by = group_by
    job.constraints = constraints
    job.scheduling_deadline_ms = deadline
    job.max_retries_preemption = retries_preemption
    job.max_retries_failure = retries_failure
    job.__class__ = JobSpec
    return job


def _constraints(raw: Any, shared: dict[object, object]) -> tuple[Constraint, ...] | None:
    """A job's non-empty ``constraints`` as the shared tuple, else None."""
    try:
        constraints = tuple(_constraint(c, "") for c in raw)
    except SnapshotError:
        return None
    return shared.setdefault(constraints, constraints)


def _request(raw: Any, shared: dict[object, object]) -> Resources | None:
    """A job's ``resources`` in the usual shape as the shared :class:`Resources`, else None."""
    if raw is None:
        return shared.setdefault(DEFAULT_REQUEST, DEFAULT_REQUEST)
    if raw.__class__ is not dict or not raw.keys() <= RESOURCE_KEYS:
        return None
    cpu = raw.get("cpu_millicores", 0)
    memory = raw.get("memory_bytes", 0)
    device = raw.get("device")
    if cpu.__class__ is not int or cpu < 0 or memory.__class__ is not int or memory < 0:
        return None
    if device is None or _is_cpu_device(device):
        resources = Resources(cpu, memory, CPU_DEVICE)
    elif device.__class__ is dict and device.keys() <= DEVICE_KEYS:
        kind, variant, count = device.get("type"), device.get("variant"), device.get("count")
        if (
            kind.__class__ is not str
            or kind not in ("gpu", "tpu")
            or (variant is not None and (variant.__class__ is not str or not variant))
            or count.__class__ is not int
            or count < 0
        ):
            return None
        resources = Resources(cpu, memory, Device(DEVICE_TYPES_BY_VALUE[kind], variant, count))
    else:
        return None
    return shared.setdefault(resources, resources)


def _job(
    job_id: str,
    i: int,
    item: dict,
    path: str,
    parsed: Mapping[str, tuple[int, dict]],
    band_of: Callable[[str], Band],
    shared: dict[object, object],
) -> JobSpec:
    """One job, every field checked in order (the first problem raises)."""
    p = f"{path}[{i}]"
    parent = _parent(job_id)
    if "parent" in item and item["parent"] != parent:
        raise fail(f"{p}.parent", f"expected {parent!r} (derived from the id)")
    submitted = json_int(item.get("submitted_at_ms", 0), p, "submitted_at_ms")
    root = "/".join(job_id.split("/")[:3])
    if item.get("root_submitted_at_ms") is not None:
        root_submitted = json_int(item["root_submitted_at_ms"], p, "root_submitted_at_ms")
    elif root in parsed:
        root_submitted = json_int(
            parsed[root][1].get("submitted_at_ms", 0), f"{path}[{parsed[root][0]}].submitted_at_ms"
        )
    else:
        root_submitted = submitted
    resources = Resources()
    if item.get("resources") is not None:
        r = item["resources"]
        if not isinstance(r, dict) or not r.keys() <= RESOURCE_KEYS:
            json_object(r, f"{p}.resources", RESOURCE_KEYS)
        resources = Resources(
            cpu_millicores=json_int(r.get("cpu_millicores", 0), p, "resources.cpu_millicores"),
            memory_bytes=json_int(r.get("memory_bytes", 0), p, "resources.memory_bytes"),
            device=_device(r["device"], p, "resources.device") if r.get("device") is not None else CPU_DEVICE,
        )
    group_by = None
    if item.get("coscheduling") is not None:
        c = json_object(item["coscheduling"], f"{p}.coscheduling", {"group_by"})
        group_by = json_str(c.get("group_by"), p, "coscheduling.group_by")
    constraints = tuple(
        _constraint(c, f"{p}.constraints[{j}]")
        for j, c in enumerate(json_list(item.get("constraints") or [], p, "constraints"))
    )
    resources = shared.setdefault(resources, resources)
    constraints = shared.setdefault(constraints, constraints)
    deadline = item.get("scheduling_deadline_ms")
    return JobSpec(
        id=job_id,
        user=json_str(item["user"], p, "user") if item.get("user") is not None else job_id.split("/")[1],
        band=band_of(job_id),
        parent=parent,
        submitted_at_ms=submitted,
        root_submitted_at_ms=root_submitted,
        replicas=json_int(item.get("replicas", 1), p, "replicas", minimum=1),
        resources=resources,
        group_by=group_by,
        constraints=constraints,
        scheduling_deadline_ms=None if deadline is None else json_int(deadline, p, "scheduling_deadline_ms"),
        max_retries_preemption=json_int(item.get("max_retries_preemption", 100), p, "max_retries_preemption"),
        max_retries_failure=json_int(item.get("max_retries_failure", 0), p, "max_retries_failure"),
    )


def _parent(job_id: str) -> str | None:
    parent = job_id.rsplit("/", 1)[0]
    return parent if parent.count("/") >= 2 else None


# -- snapshot to JSON ---------------------------------------------------------------------------
