"""The Kubernetes promotion drain and job routing, as pure functions (no database, no server)."""

from __future__ import annotations

import pytest

from scheduler.core.bands import Band
from scheduler.core.kueue import (
    KueueInput,
    RoutingTable,
    merge_into,
    plan_promotions,
    refill,
    route_job,
    settled_route,
)
from scheduler.core.types import (
    BudgetDefaults,
    BudgetSpec,
    Constraint,
    ConstraintOp,
    Decision,
    Device,
    DeviceType,
    JobSpec,
    JobState,
    Resources,
    TaskSnapshot,
    TaskState,
)

NOW = 1_800_000_000_000
UNLIMITED = BudgetDefaults(budget_limit=0)
H100 = Device(DeviceType.GPU, "H100", 8)


def job(
    name: str, *, band=Band.INTERACTIVE, replicas=1, gang=False, submitted=0, device=H100, deadline=None, constraints=()
) -> JobSpec:
    return JobSpec(
        id=name,
        user=name.split("/")[1],
        band=band,
        parent=None,
        submitted_at_ms=NOW - 100_000 + submitted,
        root_submitted_at_ms=NOW - 100_000 + submitted,
        replicas=replicas,
        resources=Resources(4000, 16 << 30, device),
        group_by="tpu-name" if gang else None,
        scheduling_deadline_ms=deadline,
        constraints=tuple(constraints),
    )


def pending(spec: JobSpec, indexes=None) -> list[TaskSnapshot]:
    return [
        TaskSnapshot(f"{spec.id}/{i}", spec.id, i) for i in (indexes if indexes is not None else range(spec.replicas))
    ]


def drain(
    jobs,
    *,
    tokens=None,
    per_minute=128,
    spend=None,
    budgets=None,
    defaults=UNLIMITED,
    unfinished=(),
    active=(),
    blocked="",
    extra_pending=(),
):
    specs = {j.id: j for j in jobs}
    tasks = [t for j in jobs for t in pending(j) if t.id not in {a.id for a in active}] + list(extra_pending)
    data = KueueInput(
        jobs=specs,
        pending=tuple(tasks),
        unfinished=frozenset(unfinished),
        active=tuple(active),
        worker="kubernetes",
        blocked=blocked,
        per_minute=per_minute,
        tokens=tokens,
        tokens_at_ms=NOW,
    )
    return plan_promotions(data, spend or {}, budgets or {}, defaults, NOW)


def promoted(plan) -> list[str]:
    return [a.task for a in plan.promotions]


# --- the token bucket -----------------------------------------------------------------------------


def test_a_bucket_never_counted_starts_full():
    assert refill(None, None, NOW, 128) == 128


def test_the_bucket_refills_at_the_rate_per_minute_and_never_above_the_cap():
    assert refill(0, NOW, NOW + 30_000, 128) == 64
    assert refill(100, NOW, NOW + 60_000, 128) == 128


def test_at_most_the_cap_is_promoted_per_minute():
    many = [job(f"/alice/j{i}", submitted=i, device=Device()) for i in range(200)]
    plan = drain(many)
    assert len(plan.promotions) == 128
    assert plan.tokens == 0
    # The next tick 15 s later has a quarter of a minute's tokens.
    assert refill(plan.tokens, plan.tokens_at_ms, NOW + 15_000, 128) == 32
    assert plan.pending_reasons["/alice/j150/0"].code == "rate_cap"


def test_promotions_are_stamped_with_the_effective_band_on_the_kubernetes_worker():
    spec = job("/alice/train")
    plan = drain([spec], spend={"alice": 9000}, defaults=BudgetDefaults(budget_limit=1000))
    assert [(a.task, a.worker, a.band) for a in plan.promotions] == [("/alice/train/0", "kubernetes", Band.BATCH)]
    assert plan.after["/alice/train/0"].state is TaskState.ASSIGNED
    assert plan.after["/alice/train/0"].band is Band.BATCH
    assert plan.effective_bands["/alice/train/0"] is Band.BATCH


# --- ranking --------------------------------------------------------------------------------------


def test_units_go_by_effective_band_then_round_robin_across_users_lower_spend_first():
    jobs = [
        job("/alice/a", replicas=3, submitted=1, device=Device()),
        job("/bob/b", replicas=2, submitted=2, device=Device()),
        job("/carol/prod", band=Band.PRODUCTION, submitted=3, device=Device()),
    ]
    plan = drain(jobs, spend={"alice": 50, "bob": 10})
    assert list(plan.order) == ["/carol/prod/0", "/bob/b/0", "/alice/a/0", "/bob/b/1", "/alice/a/1", "/alice/a/2"]
    assert promoted(plan) == list(plan.order)


def test_an_over_budget_users_work_ranks_as_batch_below_everyone_elses_interactive():
    jobs = [job("/alice/a", submitted=1, device=Device()), job("/bob/b", submitted=2, device=Device())]
    budgets = {"alice": BudgetSpec("alice", 100, Band.INTERACTIVE)}
    plan = drain(jobs, spend={"alice": 500}, budgets=budgets)
    assert list(plan.order) == ["/bob/b/0", "/alice/a/0"]
    assert plan.effective_bands["/alice/a/0"] is Band.BATCH


def test_a_gang_takes_one_round_robin_turn():
    jobs = [job("/alice/g", replicas=3, gang=True, submitted=1), job("/bob/s", replicas=2, submitted=2)]
    plan = drain(jobs)
    assert list(plan.order) == ["/alice/g/0", "/alice/g/1", "/alice/g/2", "/bob/s/0", "/bob/s/1"]


# --- gangs and the cap ----------------------------------------------------------------------------


def test_a_gang_is_promoted_only_when_all_its_tasks_are_pending():
    gang = job("/alice/g", replicas=3, gang=True)
    running = TaskSnapshot("/alice/g/2", "/alice/g", 2, state=TaskState.RUNNING)
    plan = drain([gang], active=[running])
    assert promoted(plan) == []
    assert plan.pending_reasons["/alice/g/0"].code == "gang_incomplete"
    assert "2 of 3" in plan.pending_reasons["/alice/g/0"].text()


def test_a_gang_waits_while_a_members_previous_pod_has_not_finished():
    gang = job("/alice/g", replicas=2, gang=True)
    plan = drain([gang], unfinished={"/alice/g/1"})
    assert promoted(plan) == []


def test_a_solo_task_waits_while_its_previous_pod_has_not_finished():
    plan = drain([job("/alice/s")], unfinished={"/alice/s/0"})
    assert promoted(plan) == []
    assert plan.pending_reasons["/alice/s/0"].code == "attempt_unfinished"


def test_a_gang_that_fits_the_cap_but_not_whats_left_holds_back_every_lower_band():
    solos = [job(f"/alice/p{i}", band=Band.PRODUCTION, submitted=i, device=Device()) for i in range(5)]
    gang = job("/bob/g", band=Band.PRODUCTION, replicas=8, gang=True, submitted=10)
    lower = job("/dave/i", band=Band.INTERACTIVE, submitted=12, device=Device())
    plan = drain(solos + [gang, lower], tokens=7, per_minute=20, spend={"bob": 100})
    # alice's first solo takes a token; bob's 8-pod gang fits the cap of 20 but not the 6 left,
    # so it waits; alice's other solos (same band) still use tokens; the 2 left are not given to
    # the lower band.
    assert list(plan.order)[:2] == ["/alice/p0/0", "/bob/g/0"]
    assert promoted(plan) == [f"/alice/p{i}/0" for i in range(5)]
    assert plan.pending_reasons["/bob/g/0"].code == "rate_cap"
    assert plan.pending_reasons["/dave/i/0"].code == "band_barrier"
    assert plan.pending_reasons["/dave/i/0"].text() == "Held behind a PRODUCTION gang waiting for promotion tokens"
    assert plan.tokens == 2


def test_a_gang_larger_than_the_cap_goes_alone_when_the_bucket_is_full():
    big = job("/alice/big", replicas=200, gang=True, submitted=1)
    small = job("/bob/s", submitted=2)
    plan = drain([big, small], tokens=None, per_minute=128)
    assert len(plan.promotions) == 200
    assert "/bob/s/0" not in promoted(plan)
    assert plan.pending_reasons["/bob/s/0"].code == "waiting_behind_oversized"
    assert plan.tokens == 0


def test_a_gang_larger_than_the_cap_waits_for_a_full_bucket_and_holds_everything_behind_it():
    big = job("/alice/big", replicas=200, gang=True, submitted=1)
    small = job("/bob/s", submitted=2)
    plan = drain([big, small], tokens=100, per_minute=128)
    assert promoted(plan) == []
    assert plan.pending_reasons["/alice/big/0"].code == "oversized_gang"
    assert plan.tokens == 100  # nothing spent: the bucket fills and the gang goes next


def test_nothing_is_promoted_while_the_backend_is_not_ready():
    plan = drain([job("/alice/a")], blocked="unhealthy: HTTP 503")
    assert promoted(plan) == []
    assert plan.pending_reasons["/alice/a/0"].text() == "Kubernetes backend not ready: unhealthy: HTTP 503"


def test_a_job_past_its_deadline_ends_unschedulable_and_its_running_tasks_are_killed():
    spec = job("/alice/late", replicas=2, deadline=NOW - 1)
    running = TaskSnapshot("/alice/late/1", "/alice/late", 1, state=TaskState.RUNNING)
    plan = drain([spec], active=[running])
    assert [u.task for u in plan.expired] == ["/alice/late/0"]
    assert plan.after["/alice/late/1"].state is TaskState.KILLED
    assert plan.jobs_after == {"/alice/late": JobState.UNSCHEDULABLE}


def test_merge_adds_the_plan_to_the_cores_decision():
    core = Decision(
        spend={"bob": 5},
        effective_bands={},
        order=("/bob/x/0",),
        assignments=(),
        preemptions=(),
        unschedulable=(),
        pending_reasons={"/bob/x/0": "no worker"},
        after={},
        jobs_after={},
    )
    plan = drain([job("/alice/a")])
    merged = merge_into(core, plan)
    assert merged.order == ("/bob/x/0", "/alice/a/0")
    assert [a.task for a in merged.assignments] == ["/alice/a/0"]
    assert merged.pending_reasons == {"/bob/x/0": "no worker"}
    assert merged.spend == {"bob": 5}


# --- routing --------------------------------------------------------------------------------------

GPU_H100 = (DeviceType.GPU, "H100")
TPU_V5P = (DeviceType.TPU, "v5p-8")
CPU = (DeviceType.CPU, None)
KUBE = frozenset({DeviceType.CPU, DeviceType.GPU})


def admitting(kube):
    """The built-in admitting backend, Kubernetes, accepting ``kube``'s device types."""
    return (("kubernetes", kube),)


@pytest.mark.parametrize(
    ("device", "workers", "kube", "expected"),
    [
        (H100, {CPU}, KUBE, "kubernetes"),  # no worker has an H100: Kueue
        (H100, {GPU_H100}, KUBE, "workers"),  # a registered H100 host serves it
        (Device(DeviceType.GPU, "A100", 8), {GPU_H100}, KUBE, "kubernetes"),  # wrong variant here
        (Device(DeviceType.GPU, "auto", 1), {GPU_H100}, KUBE, "workers"),  # auto takes any variant
        (Device(DeviceType.TPU, "v5p-8", 4), {TPU_V5P}, KUBE, "workers"),  # slice hosts or a scale group
        (Device(DeviceType.TPU, "v6e-8", 4), {CPU}, KUBE, "workers"),  # Kubernetes takes no TPU: waits here
        (Device(), {CPU}, KUBE, "workers"),  # a CPU job runs on any registered host
        (Device(), set(), KUBE, "kubernetes"),  # ... and on Kubernetes when there is none
        (H100, {CPU}, frozenset(), "workers"),  # Kubernetes disabled
    ],
)
def test_a_job_goes_where_its_device_is_served(device, workers, kube, expected):
    spec = job("/alice/j", device=device)
    assert route_job(spec, RoutingTable(frozenset(workers), admitting(kube))) == expected


def test_a_hard_backend_constraint_pins_the_job():
    table = RoutingTable(frozenset({GPU_H100}), admitting(KUBE))
    pinned = job("/alice/j", constraints=[Constraint("backend", ConstraintOp.EQ, "kubernetes")])
    assert route_job(pinned, table) == "kubernetes"
    soft = job("/alice/j", constraints=[Constraint("backend", ConstraintOp.EQ, "kubernetes", soft=True)])
    assert route_job(soft, table) == "workers"


def test_any_admitting_backend_is_a_route_and_only_those_are():
    """Routing asks the table which backends admit: a second one (here "slurm") is pinned to,
    and takes the devices only it accepts; a pin to a backend that does not admit stays ours."""
    table = RoutingTable(
        frozenset({CPU}), (("kubernetes", frozenset({DeviceType.GPU})), ("slurm", frozenset({DeviceType.TPU})))
    )
    pin = [Constraint("backend", ConstraintOp.EQ, "slurm")]
    assert route_job(job("/alice/j", constraints=pin), table) == "slurm"
    local = [Constraint("backend", ConstraintOp.EQ, "local")]
    assert route_job(job("/alice/j", device=H100, constraints=local), table) == "workers"
    assert route_job(job("/alice/j", device=Device(DeviceType.TPU, "v6e-8", 4)), table) == "slurm"
    assert route_job(job("/alice/j", device=H100), table) == "kubernetes"


@pytest.mark.parametrize("kube", [KUBE, frozenset({DeviceType.GPU}), frozenset()])
@pytest.mark.parametrize("pin", [None, "kubernetes", "workers"])
def test_a_route_settled_before_the_first_tick_is_the_one_the_tick_would_choose(kube, pin):
    """Submission stamps ``settled_route``'s answer: whatever workers register before the first
    tick, ``route_job`` must give the same one; where it would not, nothing is settled."""
    devices = [Device(), H100, Device(DeviceType.GPU, "auto", 1), Device(DeviceType.TPU, "v5p-8", 4)]
    worker_sets = [set(), {CPU}, {GPU_H100}, {TPU_V5P}, {CPU, GPU_H100, TPU_V5P}]
    constraints = [Constraint("backend", ConstraintOp.EQ, pin)] if pin else []
    unsettled = 0
    for device in devices:
        spec = job("/alice/j", device=device, constraints=constraints)
        routes = {route_job(spec, RoutingTable(frozenset(workers), admitting(kube))) for workers in worker_sets}
        settled = settled_route(device.type, pin, admitting(kube))
        if settled is None:
            unsettled += 1
            assert device.type in kube and pin is None
        else:
            assert routes == {settled}
    # Only jobs Kubernetes could take wait for the tick, and only when nothing pins them.
    assert unsettled == (0 if pin else sum(1 for d in devices if d.type in kube))
