"""The uplift preview against a full ``decide``: on generated clusters at rest, the preview's
bands, positions and placements of the user's tasks are what ``decide`` does with the raised
limit (``core.uplift_preview``'s argument, checked on many seeds)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.core.bands import Band
from scheduler.core.decision import decide, placements
from scheduler.core.explain import pending_queue, reason_record
from scheduler.core.feasibility import HeldWork
from scheduler.core.types import (
    ACTIVE_STATES,
    BudgetDefaults,
    BudgetSpec,
    ClusterSnapshot,
    Device,
    SchedulerConfig,
    WorkerSpec,
)
from scheduler.core.uplift_preview import PreviewBasis, QueuedTask, band_line, build_slot_stand_ins, preview_uplift
from tests.core.builders import NOW, job, task, worker

USER = "bob"


def at_rest_cluster(seed: int, victims: bool) -> ClusterSnapshot:
    """Workers mostly full; other users' pending work too big for what is left; ``bob`` over
    his limit with pending INTERACTIVE jobs (some small enough to fit) and BATCH ones. With
    ``victims``, BATCH work runs too (only bob's moved tasks could preempt it: every other
    pending task is BATCH)."""
    rng = random.Random(seed)
    workers = []
    jobs = {}
    tasks = []
    users = ["alice", "carol", "dave", "erin"]
    for w in range(rng.randint(3, 9)):
        name = f"w{w:02d}"
        cores = 8
        workers.append(worker(name, cpu=cores, mem=64, pool=rng.choice(["a", "b"])))
        used = cores - rng.choice([0, 1, 1, 2, 3])
        k = 0
        while used > 0:
            size = min(used, rng.choice([1, 2, 4]))
            owner = rng.choice(users + [USER])
            band = Band.BATCH if victims and rng.random() < 0.5 else Band.INTERACTIVE
            job_id = f"/{owner}/run-{name}-{k}"
            jobs[job_id] = job(job_id, band=band, cpu=size, mem=1, submitted=rng.randint(0, 50))
            tasks.append(task(f"{job_id}/0", "running", worker=name, band=band))
            used -= size
            k += 1
    # Equal spend among some users: a tie the round robin breaks by job order.
    for i, owner in enumerate(users + [USER]):
        for j in range(rng.randint(0, 4)):
            job_id = f"/{owner}/p{j}"
            requested = Band.BATCH if (victims or rng.random() < 0.4) else Band.INTERACTIVE
            if owner == USER:
                requested = Band.INTERACTIVE if rng.random() < 0.75 else Band.BATCH
                cpu = rng.choice([4, 5, 6])
            else:
                cpu = rng.choice([4, 5, 6])
            replicas = rng.randint(1, 7)
            gang = owner == USER and rng.random() < 0.15
            jobs[job_id] = job(
                job_id,
                band=requested,
                replicas=replicas,
                cpu=cpu,
                mem=1,
                submitted=rng.randint(0, 100) * (i + 1) % 97,
                group_by="pool" if gang else None,
            )
            tasks.extend(task(f"{job_id}/{r}", "pending") for r in range(replicas))
    budgets = {
        USER: BudgetSpec(USER, budget_limit=1, max_band=Band.INTERACTIVE),
        "carol": BudgetSpec("carol", budget_limit=rng.choice([1, 0]), max_band=Band.INTERACTIVE),
    }
    config = SchedulerConfig(
        budget_defaults=BudgetDefaults(budget_limit=rng.choice([0, 5, 1000]), max_band=Band.INTERACTIVE),
        max_tasks_per_job_per_cycle=4,
        max_building_tasks=rng.choice([0, 2, 3]),
    )
    return ClusterSnapshot(NOW, config, budgets, tuple(workers), jobs, tuple(tasks))


def basis_of(snapshot: ClusterSnapshot, decision, user: str) -> tuple[PreviewBasis, list[QueuedTask]]:
    """What the board publishes of this decision, as ``budgets.preview`` reads it."""
    queue = pending_queue(decision)
    lines, queued = {}, []
    for band, ids in queue.items():
        codes = [reason_record(decision.pending_reasons[t])["code"] for t in ids]
        lines[band] = band_line(ids, codes, snapshot.jobs, without=user)
        for i, (t, code) in enumerate(zip(ids, codes, strict=True)):
            if t.split("/", 2)[1] == user:
                queued.append(QueuedTask(t, t[: t.rfind("/")], band, i + 1, code == "per_job_cap", len(ids)))
    left = decision.capacity_left
    cap = snapshot.config.max_building_tasks
    free = []
    by_id = {w.id: w for w in snapshot.workers}
    for i, name in enumerate(left.workers):
        w = by_id[name]
        full = cap and left.building[i] >= cap
        free.append(
            WorkerSpec(
                name,
                0 if full else left.cpu[i],
                0 if full else left.mem[i],
                Device(w.device.type, w.device.variant, 0 if full else left.gpu[i] + left.tpu[i])
                if w.device.count
                else w.device,
                w.attributes,
                w.healthy,
            )
        )
    holders: dict[HeldWork, int] = {}
    for t in snapshot.tasks:
        if t.state in ACTIVE_STATES:
            spec = snapshot.jobs[t.job_id]
            held = HeldWork(spec.user, t.band or spec.band, spec.resources.device, spec.is_gang, None)
            holders[held] = holders.get(held, 0) + 1
    basis = PreviewBasis(
        now_ms=snapshot.now_ms,
        config=snapshot.config,
        spend=decision.spend,
        free=tuple(free),
        stand_ins=build_slot_stand_ins({n: b for n, b in zip(left.workers, left.building, strict=True) if b}),
        lines=lines,
        holders=holders,
        at_rest=not decision.assignments and not decision.preemptions,
    )
    return basis, queued


def at_rest(decision) -> bool:
    return not decision.assignments and not decision.preemptions and not decision.after


def raised(snapshot: ClusterSnapshot, limit: int) -> ClusterSnapshot:
    budgets = dict(snapshot.budgets)
    budgets[USER] = BudgetSpec(USER, budget_limit=limit, max_band=Band.INTERACTIVE)
    return replace(snapshot, budgets=budgets)


def full_decision_of_moved(snapshot: ClusterSnapshot, tasks) -> dict[str, tuple]:
    """{task: (band, position or None, band count, worker or None)} by a full ``decide``."""
    decision = decide(snapshot)
    queue = pending_queue(decision)
    assigned = {a.task: a.worker for a in decision.assignments}
    out = {}
    for t in tasks:
        band = decision.effective_bands[t]
        if t in assigned:
            out[t] = (band, None, len(queue.get(band, [])), assigned[t])
        else:
            ids = queue[band]
            out[t] = (band, ids.index(t) + 1, len(ids), None)
    return out, decision


def preview_of(move) -> tuple:
    return (move.band_after, move.position_after, move.band_pending_after, move.starts_on)


@pytest.mark.parametrize("seed", range(60))
def test_preview_equals_a_full_decision_on_a_cluster_at_rest(seed):
    snapshot = at_rest_cluster(seed, victims=False)
    decision = decide(snapshot)
    if not at_rest(decision):
        pytest.skip("generated cluster not at rest")
    basis, queued = basis_of(snapshot, decision, USER)
    limit = random.Random(seed).choice([0, 10**6])
    preview = preview_uplift(
        basis, USER, snapshot.jobs, queued, snapshot.budgets[USER], raised(snapshot, limit).budgets[USER]
    )
    moved = [m.task for m in preview.tasks]
    expected, after = full_decision_of_moved(raised(snapshot, limit), moved)
    assert {m.task: preview_of(m) for m in preview.tasks} == expected
    # Every task of bob's that the full decision moved is in the preview, and no other.
    really_moved = {q.task for q in queued if after.effective_bands.get(q.task, q.band) is not q.band}
    assert set(moved) == really_moved
    assert all(m.band_before is Band.BATCH and m.band_after is Band.INTERACTIVE for m in preview.tasks)


def test_the_generator_exercises_what_it_should():
    """Across the seeds: moves, held tasks and waiting tasks all occur. (On a cluster at rest a
    moved task never fits free capacity: it did not fit it in BATCH either. It can start only
    by a preemption, which the next test covers.)"""
    seen = {"moved": 0, "held": 0, "waits": 0, "ties": 0}
    for seed in range(60):
        snapshot = at_rest_cluster(seed, victims=False)
        decision = decide(snapshot)
        if not at_rest(decision):
            continue
        basis, queued = basis_of(snapshot, decision, USER)
        preview = preview_uplift(
            basis, USER, snapshot.jobs, queued, snapshot.budgets[USER], raised(snapshot, 0).budgets[USER]
        )
        seen["moved"] += bool(preview.tasks)
        line = basis.lines.get(Band.INTERACTIVE)
        mine = decision.spend.get(USER, 0)
        seen["ties"] += bool(line) and any(decision.spend.get(u, 0) == mine for u, _ in line.passed)
        seen["held"] += any(q.held for q in queued if q.task in {m.task for m in preview.tasks})
        seen["waits"] += any(m.position_after for m in preview.tasks)
    assert all(n >= 1 for n in seen.values()) and seen["moved"] >= 20, seen


@pytest.mark.parametrize("seed", range(40))
def test_with_batch_work_running_bands_always_match_and_preemptions_are_counted(seed):
    """Where BATCH work runs, the next tick may evict for bob's moved tasks: the preview does
    not decide that. Bands still match a full decision; every moved task the full decision
    placed without evicting is placed where the preview says; and whenever it evicted for
    one, the preview counted BATCH tasks bob could now preempt."""
    snapshot = at_rest_cluster(seed, victims=True)
    decision = decide(snapshot)
    if not at_rest(decision):
        pytest.skip("generated cluster not at rest")
    basis, queued = basis_of(snapshot, decision, USER)
    preview = preview_uplift(
        basis, USER, snapshot.jobs, queued, snapshot.budgets[USER], raised(snapshot, 0).budgets[USER]
    )
    expected, after = full_decision_of_moved(raised(snapshot, 0), [m.task for m in preview.tasks])
    assert {m.task: m.band_after for m in preview.tasks} == {t: e[0] for t, e in expected.items()}
    if after.preemptions:
        assert preview.preemptible.get(Band.BATCH, 0) > 0
    else:
        assert {m.task: preview_of(m) for m in preview.tasks} == expected
    for m in preview.tasks:
        if m.starts_on is not None:
            assert expected[m.task][3] == m.starts_on


def test_no_move_when_the_new_limit_still_leaves_the_user_over():
    snapshot = at_rest_cluster(3, victims=False)
    decision = decide(snapshot)
    basis, queued = basis_of(snapshot, decision, USER)
    spend = decision.spend.get(USER, 0)
    assert spend > 1
    preview = preview_uplift(
        basis, USER, snapshot.jobs, queued, snapshot.budgets[USER], raised(snapshot, spend - 1).budgets[USER]
    )
    assert preview.tasks == ()
    assert preview.unchanged == len(queued)


@pytest.mark.parametrize("seed", range(30))
def test_placements_are_the_decisions_assignments_when_nothing_is_preempted(seed):
    """``core.decision.placements`` (the preview's trial) is decide's placement pass: on
    clusters where work fits (bob's small jobs, no lower-band work to evict), the same tasks
    on the same workers in the same order as the full decision's assignments."""
    rng = random.Random(seed)
    snapshot = at_rest_cluster(seed, victims=False)
    small = {
        job_id: replace(spec, resources=replace(spec.resources, cpu_millicores=rng.choice([1000, 2000])))
        for job_id, spec in snapshot.jobs.items()
    }
    snapshot = replace(snapshot, jobs=small)
    decision = decide(snapshot)
    assert not decision.preemptions
    assert decision.assignments, "the generated cluster places something"
    assert placements(snapshot) == [(a.task, a.worker) for a in decision.assignments]


@pytest.mark.parametrize("first", [(64, 2), (1, 0), (3, 1)], ids=["as-shipped", "one-worker", "tight"])
@pytest.mark.parametrize("seed", range(25))
def test_the_first_fit_shortcut_places_as_the_whole_trial(seed, first, monkeypatch):
    """On hundreds of workers with room, trying each shape's first candidates first (the
    preview's shortcut) places bob's moved tasks exactly where a trial on every worker does:
    hard and soft constraints, build slots and several shapes competing included. With the
    first candidates cut to one or three workers, the shortcut must see when its trial is
    not the whole one (a task placed past its shape's first candidates, or left unplaced while
    candidates were left out) and try every worker."""
    from scheduler.core import uplift_preview as up
    from scheduler.core.types import Constraint, ConstraintOp

    monkeypatch.setattr(up, "FIRST_FIT_WORKERS", first[0])
    monkeypatch.setattr(up, "FIRST_FIT_FACTOR", first[1])
    rng = random.Random(seed)
    free = tuple(
        worker(
            f"w{i:03d}",
            cpu=rng.choice([0, 1, 2, 4, 8]),
            mem=rng.choice([1, 8, 32]),
            zone=rng.choice(["a", "b", "c"]),
            rack=rng.choice(["r1", "r2"]),
            healthy=rng.random() < 0.95,
        )
        for i in rng.sample(range(1000), rng.randint(120, 400))
    )
    building = {w.id: rng.randint(1, 3) for w in free if rng.random() < 0.3}
    jobs, moved = {}, []
    for j in range(rng.randint(1, 4)):
        job_id = f"/bob/m{j}"
        constraints = []
        if rng.random() < 0.4:
            constraints.append(Constraint("zone", ConstraintOp.EQ, rng.choice(["a", "b"])))
        if rng.random() < 0.4:
            constraints.append(Constraint("rack", ConstraintOp.EQ, "r2", soft=True))
        gang = rng.random() < 0.2
        replicas = rng.randint(2, 6) if gang else rng.randint(1, 40)
        jobs[job_id] = job(
            job_id,
            replicas=replicas,
            cpu=rng.choice([1, 2, 4]),
            mem=1,
            constraints=constraints,
            group_by="zone" if gang else None,
        )
        moved.extend(
            QueuedTask(f"{job_id}/{r}", job_id, Band.BATCH, r + 1, held=False, band_count=replicas)
            for r in range(replicas)
        )
    config = SchedulerConfig(
        budget_defaults=BudgetDefaults(budget_limit=0, max_band=Band.INTERACTIVE),
        max_tasks_per_job_per_cycle=0,
        max_building_tasks=rng.choice([0, 3, 4]),
    )
    basis = PreviewBasis(
        now_ms=NOW,
        config=config,
        spend={},
        free=free,
        stand_ins=build_slot_stand_ins(building),
        lines={},
    )
    shortcut = up._placements(basis, jobs, moved)
    whole = up._trial(basis, jobs, moved, free)
    assert shortcut == whole
    assert shortcut, "the generated cluster places something"


def test_the_shortcut_tries_every_worker_when_its_first_candidates_run_out(monkeypatch):
    """Five tasks, workers with room for one each, the first candidates cut to one worker: the
    shortcut's trial leaves four unplaced while candidates were left out, so it tries all."""
    from scheduler.core import uplift_preview as up

    monkeypatch.setattr(up, "FIRST_FIT_WORKERS", 1)
    monkeypatch.setattr(up, "FIRST_FIT_FACTOR", 0)
    free = tuple(worker(f"w{i:03d}", cpu=1, mem=1) for i in range(100))
    jobs = {"/bob/m": job("/bob/m", replicas=5, cpu=1, mem=1)}
    moved = [QueuedTask(f"/bob/m/{r}", "/bob/m", Band.BATCH, r + 1, held=False) for r in range(5)]
    config = SchedulerConfig(
        budget_defaults=BudgetDefaults(budget_limit=0, max_band=Band.INTERACTIVE), max_tasks_per_job_per_cycle=0
    )
    basis = PreviewBasis(now_ms=NOW, config=config, spend={}, free=free, stand_ins={}, lines={})
    assert up._placements(basis, jobs, moved) == {f"/bob/m/{r}": f"w{r:03d}" for r in range(5)}


def test_a_gangs_groups_keep_their_members_without_room():
    """A gang's groups are ranked by the soft score of all their members, room or not: zone a
    (two members without room but on rack r2) outranks zone b (one member on r2), so the
    gang goes to zone a, as a trial on every worker puts it."""
    from scheduler.core import uplift_preview as up
    from scheduler.core.types import Constraint, ConstraintOp

    free = (
        worker("w1", cpu=4, zone="a", rack="r1"),
        worker("w2", cpu=4, zone="a", rack="r1"),
        worker("w3", cpu=0, zone="a", rack="r2"),
        worker("w4", cpu=0, zone="a", rack="r2"),
        worker("w5", cpu=4, zone="b", rack="r2"),
        worker("w6", cpu=4, zone="b", rack="r1"),
    )
    soft = Constraint("rack", ConstraintOp.EQ, "r2", soft=True)
    jobs = {"/bob/g": job("/bob/g", replicas=2, cpu=2, mem=1, group_by="zone", constraints=[soft])}
    moved = [QueuedTask(f"/bob/g/{r}", "/bob/g", Band.BATCH, r + 1, held=False) for r in range(2)]
    config = SchedulerConfig(budget_defaults=BudgetDefaults(budget_limit=0, max_band=Band.INTERACTIVE))
    basis = PreviewBasis(now_ms=NOW, config=config, spend={}, free=free, stand_ins={}, lines={})
    assert (
        up._placements(basis, jobs, moved)
        == up._trial(basis, jobs, moved, free)
        == {
            "/bob/g/0": "w1",
            "/bob/g/1": "w2",
        }
    )
