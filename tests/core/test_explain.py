"""Pending reasons as data, rendered for people (reference §10)."""

from dataclasses import FrozenInstanceError, fields, replace

import pytest

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.explain import (
    BuildSlotsFull,
    Downgrade,
    GangGroupTooSmall,
    InsufficientResource,
    NoHealthyWorkers,
    PendingReason,
    PerJobCap,
    WaitingForSlice,
    format_cores,
    format_memory,
    number,
    pending_text,
    reason_record,
)
from benchmarks.synthetic import generate
from scheduler.core.explain.reasons import JobExhausted, SharedTexts, WaitingBehind, pending_reason, waiting_behind
from scheduler.core.wire import decision_to_json, snapshot_from_json
from scheduler.core.types import GroupSpec, TaskState
from tests.core.builders import GIB, budget, cluster, eq, job, reason_text, running, task, tpu_slice, worker


@pytest.mark.parametrize("n, text", [(0, "0"), (999, "999"), (12400, "12,400"), (1234567, "1,234,567")])
def test_numbers_are_grouped_for_people(n, text):
    assert number(n) == text


@pytest.mark.parametrize(
    "millicores, text", [(1000, "1 core"), (8000, "8 cores"), (500, "0.5 cores"), (1500, "1.5 cores"), (-5, "0 cores")]
)
def test_cores(millicores, text):
    assert format_cores(millicores) == text


@pytest.mark.parametrize("n_bytes, text", [(64 * GIB, "64 GiB"), (GIB + GIB // 2, "1.5 GiB"), (512 << 20, "512 MiB")])
def test_memory(n_bytes, text):
    assert format_memory(n_bytes) == text


def test_reasons_are_data_with_a_code_and_numbers():
    reason = InsufficientResource("memory", need=64 * GIB, best_free=12 * GIB, workers=3, matching=5)
    assert reason.code == "insufficient_memory"
    assert (
        reason.text()
        == "Insufficient memory: need 64 GiB, but 3 of 5 matching workers have at most 12 GiB free, the other 2 are short of something else"
    )
    assert (
        GangGroupTooSmall(4, "tpu-name", 2).text()
        == "Coscheduling: need 4 workers in same 'tpu-name' group, largest group has 2"
    )


def test_a_downgrade_reads_requested_effective_and_the_numbers():
    text = Downgrade(Band.INTERACTIVE, Band.BATCH, spend=12_400, limit=10_000).text()
    assert text == "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"


def test_a_pending_reason_is_its_cause_then_its_downgrade_and_the_place_is_added_by_pending_text():
    reason = PendingReason(PerJobCap(4), downgrade=Downgrade(Band.INTERACTIVE, Band.BATCH, 2, 1))
    assert reason.text() == (
        "Held back by the per-job limit: at most 4 tasks of a job are scheduled per tick; "
        "INTERACTIVE runs as BATCH: spend 2 > limit 1"
    )
    assert reason.code == "per_job_cap"
    assert pending_text(reason_record(reason), Band.BATCH, 1235, 40000, tick=812) == (
        "Held back by the per-job limit: at most 4 tasks of a job are scheduled per tick; "
        "position 1,235 of 40,000 in BATCH as of tick 812; INTERACTIVE runs as BATCH: spend 2 > limit 1"
    )


def test_no_healthy_worker():
    decision = decide(cluster([worker("w", healthy=False)], [job("/a/j")]))
    assert decision.pending_reasons["/a/j/0"].cause == NoHealthyWorkers()
    assert reason_text(decision, "/a/j/0").startswith("No healthy workers available")


def test_insufficient_memory_with_need_best_free_and_worker_count():
    """Two workers are short of memory (the most common blocker); the third, with plenty of
    memory, is short of CPU and does not count towards the memory numbers."""
    # w4 could hold it idle (so the job is "not now", not "never") but is busy.
    workers = [
        worker("w1", cpu=64, mem=16),
        worker("w2", cpu=64, mem=48),
        worker("w3", cpu=1, mem=512),
        worker("w4", cpu=64, mem=64),
    ]
    jobs = [job("/v/big", cpu=1, mem=64), job("/a/j", cpu=2, mem=64)]
    decision = decide(cluster(workers, jobs, [task("/v/big/0", TaskState.RUNNING, "w4")]))
    cause = decision.pending_reasons["/a/j/0"].cause
    assert cause == InsufficientResource("memory", need=64 * GIB, best_free=48 * GIB, workers=3, matching=4)
    assert reason_text(decision, "/a/j/0").startswith(
        "Insufficient memory: need 64 GiB, but 3 of 4 matching workers have at most 48 GiB free, the other 1 is short of something else"
    )


def test_insufficient_gpus():
    workers = [worker("g", cpu=64, mem=256, gpu=8, variant="h100")]
    jobs = [job("/v/half", gpu=4, variant="h100"), job("/a/j", gpu=8, variant="h100")]
    decision = decide(cluster(workers, jobs, [task("/v/half/0", TaskState.RUNNING, "g")]))
    assert "Insufficient GPUs: need 8 GPUs, but 1 of 1 matching worker has at most 4 GPUs free" == reason_text(
        decision, "/a/j/0"
    )


def test_more_gpus_than_any_worker_has_never_fits():
    workers = [worker("g", cpu=64, mem=256, gpu=4, variant="h100")]
    decision = decide(cluster(workers, [job("/a/j", gpu=8, variant="h100")]))
    assert reason_text(decision, "/a/j/0").startswith(
        "Never fits on the cluster as it is; 8 GPUs: 0 healthy workers have it"
    )


V5P_POOL = GroupSpec("v5p-pool", "v5p", "us-east5-a", max_slices=4, hosts_per_slice=4, chips_per_host=4)


@pytest.mark.parametrize(
    "workers",
    [
        pytest.param([worker("cpu")], id="no-tpu-worker"),
        pytest.param(tpu_slice("s", hosts=2), id="slice-too-small-for-the-gang"),
        pytest.param(tpu_slice("s", hosts=4, chips=2), id="hosts-with-too-few-chips"),
    ],
)
def test_a_tpu_job_a_scale_group_could_create_a_slice_for_waits_for_the_slice(workers):
    spec = job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")
    alone = decide(cluster(workers, [spec]))
    assert alone.pending_reasons["/a/g/0"].code != "scale_group"
    decision = decide(replace(cluster(workers, [spec]), scale_groups=(V5P_POOL,)))
    for i in range(4):
        assert decision.pending_reasons[f"/a/g/{i}"].cause == WaitingForSlice("v5p-pool")
    assert reason_text(decision, "/a/g/0") == (
        "Waiting for a TPU slice: no worker can hold it yet, scale group 'v5p-pool' can create one"
    )


def test_a_scale_group_of_another_variant_or_zone_leaves_never_as_never():
    workers = [worker("g", cpu=64, mem=256, tpu=4, variant="v5p")]
    jobs = [job("/a/big", tpu=8, variant="v5p"), job("/a/zoned", tpu=8, variant="v5p", constraints=[eq("zone", "eu")])]
    groups = (GroupSpec("v6e-pool", "v6e", "us-east5-a", chips_per_host=8), replace(V5P_POOL, chips_per_host=8))
    decision = decide(replace(cluster(workers, jobs), scale_groups=groups))
    assert decision.pending_reasons["/a/big/0"].cause == WaitingForSlice("v5p-pool")
    assert decision.pending_reasons["/a/zoned/0"].code == "constraints_match_nothing"
    assert (
        decide(replace(cluster(workers, jobs[:1]), scale_groups=groups[:1])).pending_reasons["/a/big/0"].code
        == "never_fits"
    )


def test_build_slots():
    jobs = [job("/v/b", replicas=8, cpu=0, mem=0), job("/a/j")]
    tasks = [task(f"/v/b/{i}", TaskState.BUILDING, "w") for i in range(8)]
    decision = decide(cluster([worker("w")], jobs, tasks))
    assert decision.pending_reasons["/a/j/0"].cause == BuildSlotsFull(workers=1, matching=1, limit=8)


def test_per_worker_assignment_cap():
    decision = decide(cluster([worker("w", cpu=64)], [job("/a/x", replicas=4), job("/a/y", submitted=1)]))
    reason = decision.pending_reasons["/a/y/0"]
    assert (reason.code, reason.cause.cause.code) == ("waiting_behind", "assignment_cap")
    assert "1 of 1 matching worker already took 4 new tasks this tick" in reason_text(decision, "/a/y/0")


def test_waiting_behind_higher_priority_tasks_that_took_the_room():
    workers = [worker("w", cpu=4)]
    jobs = [job("/a/first", band="production", replicas=2, cpu=2), job("/b/later", cpu=2)]
    decision = decide(cluster(workers, jobs))
    text = reason_text(decision, "/b/later/0")
    assert decision.pending_reasons["/b/later/0"].code == "waiting_behind"
    assert text.startswith("Waiting behind 2 higher-priority tasks placed this tick; now: Insufficient CPU")


def test_gang_group_too_small():
    decision = decide(
        cluster(tpu_slice("s", hosts=2), [job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")])
    )
    for i in range(4):
        assert decision.pending_reasons[f"/a/g/{i}"].cause == GangGroupTooSmall(4, "tpu-name", 2)


def test_gang_groups_without_room():
    workers = tpu_slice("s", hosts=4)
    jobs = [
        job("/v/run", band="interactive", tpu=4, variant="v5p"),
        job("/a/g", replicas=4, tpu=4, variant="v5p", group_by="tpu-name"),
    ]
    decision = decide(cluster(workers, jobs, [running("/v/run/0", "s-1")]))
    assert "need 4 workers with room in one 'tpu-name' group, best group has 3" in reason_text(decision, "/a/g/0")


def test_constraints_that_match_nothing_are_named_with_the_automatic_ones():
    decision = decide(cluster([worker("w")], [job("/a/j", gpu=1, variant="h100", constraints=[eq("zone", "x")])]))
    assert reason_text(decision, "/a/j/0").startswith(
        "No healthy worker matches constraints [device-type=gpu, device-variant=h100, zone=x]"
    )


def test_every_task_still_pending_has_a_reason_and_a_jobs_tasks_share_it():
    decision = decide(cluster([worker("w", cpu=2)], [job("/a/j", replicas=10, cpu=1)]))
    pending = {f"/a/j/{i}" for i in range(2, 10)}
    assert set(decision.pending_reasons) == pending
    held = {id(decision.pending_reasons[f"/a/j/{i}"]) for i in range(4, 10)}
    assert len(held) == 1


def test_the_downgrade_is_attached_only_where_the_band_changed():
    workers = [worker("w", cpu=1), worker("busy", cpu=10, mem=100)]
    jobs = [job("/a/run", cpu=10, mem=0), job("/a/more", cpu=2), job("/b/other", cpu=2)]
    decision = decide(cluster(workers, jobs, [running("/a/run/0", "busy")], budgets=[budget("a", 10)]))
    assert decision.pending_reasons["/a/more/0"].downgrade == Downgrade(Band.INTERACTIVE, Band.BATCH, 50, 10)
    assert decision.pending_reasons["/b/other/0"].downgrade is None


def test_reason_text_is_rendered_once_per_object():
    reason = PendingReason(PerJobCap(4))
    assert reason.text() is reason.text()


def test_shared_texts_render_each_reason_as_its_own_text():
    cause = InsufficientResource("cpu", 4000, 1000, 3, 10)
    downgrade = Downgrade(Band.INTERACTIVE, Band.BATCH, spend=12_400, limit=10_000)
    cached = PendingReason(PerJobCap(4))
    cached.text()
    reasons = [
        PendingReason(WaitingBehind(1, cause), downgrade),
        PendingReason(WaitingBehind(12_400, cause)),
        PendingReason(JobExhausted(cause), downgrade),
        PendingReason(cause, downgrade),
        PendingReason(NoHealthyWorkers()),
        cached,
        GangGroupTooSmall(4, "tpu-name", 2),
        "a plain string",
    ]
    plain = [replace(r).text() if isinstance(r, PendingReason) else getattr(r, "text", r.__str__)() for r in reasons]
    shared = SharedTexts()
    assert [shared.text(r) for r in reasons] == plain
    assert [shared.text(r) for r in reasons] == plain  # again: parts and reasons already rendered
    assert shared.text(reasons[6]) is shared.text(reasons[6])  # a bare cause is remembered
    assert plain[0] == (
        "Waiting behind 1 higher-priority task placed this tick; now: "
        + cause.text()
        + "; INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"
    )


def test_shared_texts_match_the_plain_texts_of_a_decision():
    doc = generate(pending=2000, workers=200, seed=0)
    plain = decide(snapshot_from_json(doc)).pending_reasons
    reasons = decide(snapshot_from_json(doc)).pending_reasons
    distinct = {id(r): r for r in reasons.values()}.values()
    behind = [r.cause for r in distinct if type(r.cause) is WaitingBehind]
    # The mix shares inner causes and downgrades between reasons: the memo is exercised.
    assert len({id(c.cause) for c in behind}) < len(behind)
    assert len({id(r.downgrade) for r in distinct if r.downgrade}) < sum(1 for r in distinct if r.downgrade)
    shared = SharedTexts()
    expected = {task: r.text() for task, r in plain.items()}
    assert {task: shared.text(r) for task, r in reasons.items()} == expected
    snapshot = snapshot_from_json(doc)
    assert decision_to_json(decide(snapshot), snapshot)["pending_reasons"] == expected


@pytest.mark.parametrize("ahead", [1, 7, 12400])
@pytest.mark.parametrize(
    "downgrade", [None, Downgrade(requested=Band.INTERACTIVE, effective=Band.BATCH, spend=9, limit=4)]
)
def test_reasons_built_by_their_fillers_are_the_constructors_reasons(ahead, downgrade):
    cause = InsufficientResource("cpu", 4000, 1000, 3, 10)
    made = pending_reason(waiting_behind(ahead, cause), downgrade)
    constructed = PendingReason(WaitingBehind(ahead, cause), downgrade)
    assert [f.name for f in fields(WaitingBehind)] == ["ahead", "cause"]
    assert [f.name for f in fields(PendingReason)] == ["cause", "downgrade", "_text"]
    assert type(made) is PendingReason and type(made.cause) is WaitingBehind
    assert made == constructed and hash(made) == hash(constructed) and repr(made) == repr(constructed)
    assert made.text() == constructed.text() and made.code == constructed.code == "waiting_behind"
    with pytest.raises(FrozenInstanceError):
        made.cause = cause
