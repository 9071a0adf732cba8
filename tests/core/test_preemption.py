"""The preemption pass and victim outcomes (reference §4)."""

import pytest

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.types import JobState, TaskState
from tests.core.builders import budget, cluster, evicted, job, placed, running, task, tpu_slice, worker


def full_host(name, cores=8):
    return worker(name, cpu=cores, mem=64)


def test_the_cheapest_victim_in_the_lowest_band_goes():
    workers = [full_host("w1"), full_host("w2"), full_host("w3")]
    jobs = [
        job("/v/pricey", band="batch", cpu=8, mem=40),
        job("/v/cheap", band="batch", cpu=8, mem=10),
        job("/v/peer", band="interactive", cpu=8, mem=1),
        job("/a/new", band="interactive", cpu=8, mem=1),
    ]
    tasks = [running("/v/pricey/0", "w1"), running("/v/cheap/0", "w2"), running("/v/peer/0", "w3")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/cheap/0": "/a/new/0"}
    assert placed(decision) == {"/a/new/0": "w2"}


def test_the_lowest_band_goes_before_a_cheaper_higher_band():
    workers = [full_host("w1"), full_host("w2")]
    jobs = [
        job("/v/inter", band="interactive", cpu=8, mem=1),
        job("/v/batch", band="batch", cpu=8, mem=50),
        job("/a/prod", band="production", cpu=8, mem=1),
    ]
    tasks = [running("/v/inter/0", "w1"), running("/v/batch/0", "w2")]
    assert evicted(decide(cluster(workers, jobs, tasks))) == {"/v/batch/0": "/a/prod/0"}


@pytest.mark.parametrize(
    "candidate, victim, preempts",
    [
        ("system", "production", True),
        ("production", "interactive", True),
        ("production", "batch", True),
        ("interactive", "batch", True),
        ("interactive", "interactive", False),  # equal bands never preempt
        ("batch", "batch", False),
        ("interactive", "production", False),  # never upward
        ("batch", "interactive", False),
    ],
)
def test_only_strictly_lower_bands_are_preempted(candidate, victim, preempts):
    jobs = [job("/v/run", band=victim, cpu=8), job("/a/new", band=candidate, cpu=8)]
    decision = decide(cluster([full_host("w")], jobs, [running("/v/run/0", "w")]))
    assert bool(decision.preemptions) is preempts


def test_the_stamped_band_decides_not_the_requested_one():
    """An INTERACTIVE job's task that was stamped BATCH (its user was over budget) is a BATCH victim."""
    jobs = [job("/v/run", band="interactive", cpu=8), job("/a/new", band="interactive", cpu=8)]
    decision = decide(cluster([full_host("w")], jobs, [running("/v/run/0", "w", band="batch")]))
    assert evicted(decision) == {"/v/run/0": "/a/new/0"}
    assert decision.preemptions[0].victim_band is Band.BATCH


def test_an_effective_batch_task_never_preempts():
    workers = [full_host("w"), full_host("busy")]
    jobs = [job("/v/run", band="batch", cpu=8), job("/a/new", band="interactive", cpu=8), job("/a/old", cpu=8)]
    tasks = [running("/v/run/0", "w"), running("/a/old/0", "busy")]  # a spends 40 points
    decision = decide(cluster(workers, jobs, tasks, budgets=[budget("a", 1)]))
    assert decision.effective_bands["/a/new/0"] is Band.BATCH
    assert decision.preemptions == ()


def test_a_different_device_variant_is_never_preempted():
    workers = [worker("g", cpu=64, mem=256, gpu=8, variant="a100")]
    jobs = [
        job("/v/run", band="batch", gpu=8, variant="a100"),
        job("/a/new", band="production", gpu=8, variant="h100", constraints=[]),
    ]
    assert decide(cluster(workers, jobs, [running("/v/run/0", "g")])).preemptions == ()


def test_a_cpu_task_does_not_preempt_accelerator_work():
    workers = [worker("g", cpu=8, mem=64, gpu=8, variant="h100")]
    jobs = [job("/v/run", band="batch", cpu=8, gpu=1, variant="h100"), job("/a/new", band="production", cpu=8)]
    assert decide(cluster(workers, jobs, [running("/v/run/0", "g")])).preemptions == ()


def test_a_solo_task_never_tears_down_a_gang():
    workers = tpu_slice("s1", hosts=2)
    jobs = [
        job("/v/gang", band="batch", replicas=2, tpu=4, variant="v5p", group_by="tpu-name"),
        job("/a/solo", band="production", tpu=4, variant="v5p"),
    ]
    tasks = [running("/v/gang/0", "s1-0"), running("/v/gang/1", "s1-1")]
    assert decide(cluster(workers, jobs, tasks)).preemptions == ()


def test_a_task_never_preempts_its_own_job():
    jobs = [job("/a/j", band="interactive", replicas=2, cpu=8)]
    decision = decide(cluster([full_host("w")], jobs, [running("/a/j/0", "w", band="batch")]))
    assert decision.preemptions == ()


def test_a_job_with_running_tasks_of_its_own_evicts_the_best_victim_of_another_job():
    """Its own cheapest task is passed over for the next best victim, found by the same indexed
    search every other job uses, and never on a worker where only its own tasks run."""
    workers = [full_host("w1"), full_host("w2"), full_host("w3"), full_host("w4")]
    jobs = [
        job("/a/j", band="interactive", replicas=4, cpu=8, mem=1),  # cheapest: 8 cpu, 1 GiB
        job("/v/mid", band="batch", cpu=8, mem=20),
        job("/v/pricey", band="batch", cpu=8, mem=40),
        job("/v/peer", band="interactive", cpu=8, mem=1),
    ]
    tasks = [
        running("/a/j/0", "w1", band="batch"),  # stamped BATCH while its user was over budget
        running("/v/pricey/0", "w2"),
        running("/v/mid/0", "w3"),
        running("/v/peer/0", "w4"),
    ]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/mid/0": "/a/j/1", "/v/pricey/0": "/a/j/2"}
    assert placed(decision) == {"/a/j/1": "w3", "/a/j/2": "w2"}
    assert "/a/j/3" in decision.pending_reasons


def test_where_no_single_victim_is_enough_the_fewest_on_one_worker_go():
    """Need 6 cores on a full 8-core host running 2, 3 and 4-core BATCH tasks (cheapest first):
    adding in order takes all three; dropping what the fit does not need leaves 2 + 4."""
    jobs = [
        job("/v/two", band="batch", cpu=2, mem=0),
        job("/v/three", band="batch", cpu=3, mem=0),
        job("/v/four", band="batch", cpu=4, mem=0, submitted=1),
        job("/a/new", band="interactive", cpu=6, mem=0),
    ]
    workers = [worker("w", cpu=9, mem=64)]
    tasks = [running("/v/two/0", "w"), running("/v/three/0", "w"), running("/v/four/0", "w")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/two/0": "/a/new/0", "/v/four/0": "/a/new/0"}
    assert placed(decision) == {"/a/new/0": "w"}


def test_victims_are_never_summed_across_workers():
    workers = [worker("w1", cpu=4, mem=64), worker("w2", cpu=4, mem=64)]
    jobs = [job("/v/a", band="batch", cpu=4), job("/v/b", band="batch", cpu=4), job("/a/new", cpu=6)]
    tasks = [running("/v/a/0", "w1"), running("/v/b/0", "w2")]
    assert decide(cluster(workers, jobs, tasks)).preemptions == ()


def test_a_single_victim_anywhere_beats_a_set_of_cheaper_ones():
    workers = [worker("w1", cpu=8, mem=64), worker("w2", cpu=8, mem=64)]
    jobs = [
        job("/v/small", band="batch", replicas=2, cpu=4, mem=0),
        job("/v/big", band="batch", cpu=8, mem=30),
        job("/a/new", cpu=8, mem=0),
    ]
    tasks = [running("/v/small/0", "w1"), running("/v/small/1", "w1"), running("/v/big/0", "w2")]
    assert evicted(decide(cluster(workers, jobs, tasks))) == {"/v/big/0": "/a/new/0"}


def test_equal_sized_victim_sets_tie_on_total_value_then_worker_id():
    def run(mem_w1, mem_w2):
        workers = [worker("w2", cpu=8, mem=64), worker("w1", cpu=8, mem=64)]
        jobs = [
            job("/v/x", band="batch", replicas=2, cpu=4, mem=mem_w1),
            job("/v/y", band="batch", replicas=2, cpu=4, mem=mem_w2),
            job("/a/new", cpu=8, mem=0),
        ]
        tasks = [running("/v/x/0", "w1"), running("/v/x/1", "w1"), running("/v/y/0", "w2"), running("/v/y/1", "w2")]
        return placed(decide(cluster(workers, jobs, tasks)))["/a/new/0"]

    assert run(mem_w1=2, mem_w2=1) == "w2"  # lower total value
    assert run(mem_w1=1, mem_w2=1) == "w1"  # then worker id


def test_a_worker_that_can_already_fit_the_task_is_not_a_preemption_target():
    """w1 has room but already took its four new tasks this tick; w2 is full of BATCH work.
    Nothing is evicted on w1 (it needs no eviction); w2's victim makes room instead."""
    workers = [worker("w1", cpu=16, mem=64), worker("w2", cpu=8, mem=64)]
    jobs = [
        job("/a/first", band="interactive", replicas=4, cpu=1, submitted=1),
        job("/a/late", band="interactive", cpu=8, submitted=2),
        job("/v/run", band="batch", cpu=8),
    ]
    decision = decide(cluster(workers, jobs, [running("/v/run/0", "w2")]))
    assert placed(decision)["/a/late/0"] == "w2"
    assert evicted(decision) == {"/v/run/0": "/a/late/0"}


def test_a_preemptor_needs_a_free_build_slot():
    jobs = [
        job("/v/run", band="batch", cpu=8),
        job("/v/b", band="batch", replicas=8, cpu=0, mem=0),
        job("/a/new", cpu=8),
    ]
    tasks = [running("/v/run/0", "w")] + [task(f"/v/b/{i}", TaskState.BUILDING, "w") for i in range(8)]
    assert decide(cluster([full_host("w")], jobs, tasks)).preemptions == ()


def test_the_preemptor_is_assigned_to_the_freed_worker_in_the_same_decision():
    jobs = [job("/v/run", band="batch", cpu=8), job("/a/new", band="production", cpu=8)]
    decision = decide(cluster([full_host("w")], jobs, [running("/v/run/0", "w")]))
    [preemption] = decision.preemptions
    assert (preemption.victim, preemption.preemptor, preemption.worker) == ("/v/run/0", "/a/new/0", "w")
    assert (preemption.victim_band, preemption.preemptor_band) == (Band.BATCH, Band.PRODUCTION)
    assert [(a.task, a.worker, a.band) for a in decision.assignments] == [("/a/new/0", "w", Band.PRODUCTION)]
    assert "/a/new/0" not in decision.pending_reasons


def test_each_victim_is_claimed_once():
    workers = [full_host("w1"), full_host("w2")]
    jobs = [job("/v/run", band="batch", replicas=2, cpu=8), job("/a/new", replicas=3, cpu=8)]
    tasks = [running("/v/run/0", "w1"), running("/v/run/1", "w2")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/run/0": "/a/new/0", "/v/run/1": "/a/new/1"}
    assert placed(decision) == {"/a/new/0": "w1", "/a/new/1": "w2"}
    assert "/a/new/2" in decision.pending_reasons


@pytest.mark.parametrize(
    "count, retries, state, new_count",
    [
        (0, 100, TaskState.PENDING, 1),
        (2, 3, TaskState.PENDING, 3),
        (3, 3, TaskState.PREEMPTED, 4),
        (0, 0, TaskState.PREEMPTED, 1),
    ],
)
def test_a_running_victim_is_charged_and_retries_until_its_budget_is_spent(count, retries, state, new_count):
    jobs = [job("/v/run", band="batch", cpu=8, max_retries_preemption=retries), job("/a/new", cpu=8)]
    decision = decide(cluster([full_host("w")], jobs, [running("/v/run/0", "w", preemption_count=count)]))
    after = decision.after["/v/run/0"]
    assert (after.state, after.worker, after.band, after.preemption_count) == (state, None, None, new_count)
    if state is TaskState.PENDING:
        assert "Preempted by /a/new/0" in decision.pending_reasons["/v/run/0"].text()
        assert decision.jobs_after == {}
    else:
        assert decision.jobs_after == {"/v/run": JobState.PREEMPTED}


def test_a_solo_job_with_other_live_tasks_does_not_end_when_one_task_is_preempted_for_good():
    workers = [full_host("w1"), full_host("w2")]
    jobs = [job("/v/run", band="batch", replicas=2, cpu=8, max_retries_preemption=0), job("/a/new", cpu=8)]
    tasks = [running("/v/run/0", "w1"), running("/v/run/1", "w2", band="interactive")]
    decision = decide(cluster(workers, jobs, tasks))
    assert decision.after["/v/run/0"].state is TaskState.PREEMPTED
    assert decision.jobs_after == {}


def gang_world(max_retries=100, sibling_state=TaskState.BUILDING):
    """A BATCH gang of 4 on slice s1: three members RUNNING, one still ``sibling_state``; a
    PRODUCTION gang of 3 wants the slice."""
    workers = tpu_slice("s1", hosts=4)
    jobs = [
        job(
            "/v/gang",
            band="batch",
            replicas=4,
            tpu=4,
            variant="v5p",
            group_by="tpu-name",
            max_retries_preemption=max_retries,
        ),
        job("/a/gang", band="production", replicas=3, tpu=4, variant="v5p", group_by="tpu-name"),
    ]
    tasks = [running(f"/v/gang/{i}", f"s1-{i}") for i in range(3)] + [task("/v/gang/3", sibling_state, "s1-3")]
    return cluster(workers, jobs, tasks)


def test_a_gang_evicts_a_whole_lower_band_slice_and_takes_its_hosts():
    decision = decide(gang_world())
    assert sorted(evicted(decision)) == ["/v/gang/0", "/v/gang/1", "/v/gang/2"]
    assert placed(decision) == {"/a/gang/0": "s1-0", "/a/gang/1": "s1-1", "/a/gang/2": "s1-2"}
    for i in range(3):  # every member of the evicted slice is charged
        assert decision.after[f"/v/gang/{i}"].preemption_count == 1
    # the sibling that was not a victim goes back to the queue free of charge
    sibling = decision.after["/v/gang/3"]
    assert (sibling.state, sibling.preemption_count) == (TaskState.PENDING, 0)
    assert decision.pending_reasons["/v/gang/3"].code == "gang_requeued"


def test_an_assigned_gang_sibling_is_requeued_free_of_charge():
    decision = decide(gang_world(sibling_state=TaskState.ASSIGNED))
    sibling = decision.after["/v/gang/3"]
    assert (sibling.state, sibling.preemption_count) == (TaskState.PENDING, 0)


def test_when_a_gang_victim_ends_its_siblings_and_job_end_cosched_failed():
    decision = decide(gang_world(max_retries=0))
    assert {decision.after[f"/v/gang/{i}"].state for i in range(3)} == {TaskState.PREEMPTED}
    assert decision.after["/v/gang/3"].state is TaskState.COSCHED_FAILED
    assert decision.jobs_after == {"/v/gang": JobState.COSCHED_FAILED}


def test_a_gang_evicts_nothing_unless_it_can_take_all_its_hosts():
    """Only two of the four hosts run lower-band work; the others run INTERACTIVE solo tasks."""
    workers = tpu_slice("s1", hosts=4)
    jobs = [
        job("/v/low", band="batch", replicas=2, tpu=4, variant="v5p"),
        job("/v/peer", band="interactive", replicas=2, tpu=4, variant="v5p"),
        job("/a/gang", band="interactive", replicas=4, tpu=4, variant="v5p", group_by="tpu-name"),
    ]
    tasks = [
        running("/v/low/0", "s1-0"),
        running("/v/low/1", "s1-1"),
        running("/v/peer/0", "s1-2"),
        running("/v/peer/1", "s1-3"),
    ]
    decision = decide(cluster(workers, jobs, tasks))
    assert decision.preemptions == ()
    assert placed(decision) == {}


def test_a_gang_evicts_the_cheapest_lower_band_squatters_on_the_hosts_it_needs():
    """Hosts 0 and 1 of the slice are free; hosts 2 and 3 are filled by BATCH CPU work."""
    workers = tpu_slice("s1", hosts=4, cpu=16)
    jobs = [
        job("/v/squat", band="batch", replicas=2, cpu=16, mem=1),
        job("/a/gang", band="interactive", replicas=4, cpu=8, tpu=4, variant="v5p", group_by="tpu-name"),
    ]
    tasks = [running("/v/squat/0", "s1-2"), running("/v/squat/1", "s1-3")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/squat/0": "/a/gang/2", "/v/squat/1": "/a/gang/3"}
    assert placed(decision) == {f"/a/gang/{i}": f"s1-{i}" for i in range(4)}


def test_a_gang_never_evicts_a_slice_of_another_variant():
    workers = tpu_slice("s1", hosts=2, variant="v6e")
    jobs = [
        job("/v/gang", band="batch", replicas=2, tpu=4, variant="v6e", group_by="tpu-name"),
        job("/a/gang", band="production", replicas=2, tpu=4, variant="v5p", group_by="tpu-name"),
    ]
    tasks = [running("/v/gang/0", "s1-0"), running("/v/gang/1", "s1-1")]
    assert decide(cluster(workers, jobs, tasks)).preemptions == ()


def test_assigned_and_building_tasks_are_never_victims():
    jobs = [job("/v/run", band="batch", replicas=2, cpu=4), job("/a/new", band="production", cpu=8)]
    tasks = [task("/v/run/0", TaskState.ASSIGNED, "w"), task("/v/run/1", TaskState.BUILDING, "w")]
    assert decide(cluster([full_host("w")], jobs, tasks)).preemptions == ()


def test_victims_on_unhealthy_workers_are_left_alone():
    jobs = [job("/v/run", band="batch", cpu=8), job("/a/new", band="production", cpu=8)]
    workers = [worker("w", cpu=8, mem=64, healthy=False), worker("x", cpu=1, mem=1)]
    assert decide(cluster(workers, jobs, [running("/v/run/0", "w")])).preemptions == ()


# --- may_evict: the pass's eligibility, as "Held by" states it (issue 23) ---------------------------

import itertools  # noqa: E402

from scheduler.core.feasibility import analyse_job  # noqa: E402
from scheduler.core.preemption import may_evict  # noqa: E402

# (device kind, variant) a worker has and a job asks for; None: any variant ("auto").
WORKER_KINDS = [("cpu", None), ("gpu", "a100"), ("gpu", "h100"), ("tpu", "v5p")]
JOB_KINDS = [("cpu", None), ("gpu", "a100"), ("gpu", "h100"), ("gpu", None), ("tpu", "v5p"), ("tpu", None)]


def kind_args(kind, count):
    dtype, variant = kind
    return (
        {"gpu": count, "variant": variant}
        if dtype == "gpu"
        else {"tpu": count, "variant": variant}
        if dtype == "tpu"
        else {}
    )


def test_may_evict_says_exactly_what_the_pass_evicts():
    """Every combination of a worker's kind, a victim's kind, band and gang-ness and a solo
    candidate's kind and band: one full worker, one victim filling it, one candidate that fits
    only once it is gone. The pass evicts exactly when ``may_evict`` says so (among candidates
    able to run there at all), and both answers occur."""
    outcomes = set()
    for host_kind, victim_kind, candidate_kind, band, victim_band, victim_gang in itertools.product(
        WORKER_KINDS, JOB_KINDS, JOB_KINDS, list(Band), list(Band), (False, True)
    ):
        host = worker("h", cpu=8, mem=64, pool="p", **kind_args(host_kind, 4))
        victim = job(
            "/v/run",
            band=victim_band,
            cpu=8,
            mem=1,
            group_by="pool" if victim_gang else None,
            **kind_args(victim_kind, 4),
        )
        candidate = job("/a/new", band=band, cpu=8, mem=1, **kind_args(candidate_kind, 4))
        if analyse_job(victim, [host]).never or analyse_job(candidate, [host]).never:
            continue  # nothing could hold it, or the candidate may never run there: no holder question
        decision = decide(cluster([host], [victim, candidate], [running("/v/run/0", "h", victim_band)]))
        expected = may_evict(
            band,
            candidate.resources.device,
            False,
            victim_band,
            victim.resources.device,
            victim_gang,
            host.device.variant,
        )
        assert bool(decision.preemptions) == expected, (
            host_kind,
            victim_kind,
            candidate_kind,
            band,
            victim_band,
            victim_gang,
        )
        outcomes.add(expected)
    assert outcomes == {True, False}


def test_a_cpu_task_may_not_evict_tpu_work_on_a_tpu_host_but_may_evict_cpu_work_there():
    host = worker("t", cpu=8, mem=64, tpu=4, variant="v5p")
    cpu, tpu = job("/a/c", cpu=8).resources.device, job("/v/t", tpu=4, variant="v5p").resources.device
    assert not may_evict(Band.INTERACTIVE, cpu, False, Band.BATCH, tpu, False, host.device.variant)
    assert may_evict(Band.INTERACTIVE, cpu, False, Band.BATCH, cpu, False, host.device.variant)
    assert not may_evict(Band.INTERACTIVE, cpu, False, Band.INTERACTIVE, cpu, False, host.device.variant)


def test_tasks_by_worker_groups_a_jobs_tasks_per_worker_by_index():
    """Runs per worker taken as they come must give what one sort on (worker, index) gives:
    tasks in runs, out of index order, a worker coming back after another, one task."""
    import random
    from itertools import groupby

    from scheduler.core.preemption.candidates import tasks_by_worker
    from scheduler.core.preemption.ordering import worker_of, worker_then_index

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 12)
        workers = [rng.choice(["w0", "w1", "w2", "w3"]) for _ in range(4)]
        tasks = [
            running(f"/a/j/{i}", workers[min(i // 3, 3)] if rng.random() < 0.7 else rng.choice(workers))
            for i in range(n)
        ]
        if rng.random() < 0.3:
            rng.shuffle(tasks)
        expected = {w: list(run) for w, run in groupby(sorted(tasks, key=worker_then_index), worker_of)}
        found = tasks_by_worker(tasks)
        assert len(found) == len(expected)
        assert dict(found) == expected


def test_the_workers_with_squatters_are_those_with_solo_victims_left(monkeypatch):
    """The pass's set of workers with solo victims (gangs only look at groups holding one of
    them) loses a worker when its last victim group is evicted, and only then."""
    import scheduler.core.decision as decision_module
    from scheduler.core.preemption import PreemptionPass

    seen = []

    class Recording(PreemptionPass):
        def run(self):
            before = set(self.squatted)
            plan = super().run()
            seen.append((before, self))
            return plan

    monkeypatch.setattr(decision_module, "PreemptionPass", Recording)
    workers = [full_host("w1"), full_host("w2")]
    jobs = [
        job("/v/pricey", band="batch", cpu=8, mem=40),
        job("/v/cheap", band="batch", cpu=8, mem=10),
        job("/a/new", band="interactive", cpu=8, mem=1),
    ]
    tasks = [running("/v/pricey/0", "w1"), running("/v/cheap/0", "w2")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {"/v/cheap/0": "/a/new/0"}
    ((before, done),) = seen
    ids = done.pool.ids
    assert {ids[w] for w in before} == {"w1", "w2"}
    assert {ids[w] for w in done.squatted} == {"w1"}
    assert done.squatted == {w for w, groups in done.solo.items() if groups}


def test_a_group_a_gang_failed_is_searched_again_once_one_of_its_hosts_changed():
    """``/a/g1`` finds no room on the slice's hosts even without the squatter; ``/a/g2`` then
    evicts the whole BATCH slice and takes two hosts, which leaves room for ``/a/g3`` (``/a/g1``'s
    request) once the squatter goes: the group that failed for the request is tried again."""
    workers = tpu_slice("s1", hosts=4, cpu=16)
    jobs = [
        job("/v/slice", band="batch", replicas=4, cpu=8, tpu=4, variant="v5p", group_by="tpu-name"),
        job("/v/squat", band="batch", cpu=6),
        job("/a/g1", band="interactive", replicas=4, cpu=12, group_by="tpu-name"),
        job("/a/g2", band="interactive", replicas=2, cpu=1, tpu=4, variant="v5p", group_by="tpu-name"),
        job("/a/g3", band="interactive", replicas=4, cpu=12, group_by="tpu-name"),
    ]
    tasks = [running(f"/v/slice/{i}", f"s1-{i}") for i in range(4)] + [running("/v/squat/0", "s1-3")]
    decision = decide(cluster(workers, jobs, tasks))
    assert evicted(decision) == {
        **{f"/v/slice/{i}": "/a/g2/0" if i != 1 else "/a/g2/1" for i in range(4)},
        "/v/squat/0": "/a/g3/3",
    }
    assert {t: w for t, w in placed(decision).items() if t.startswith("/a/g3/")} == {
        f"/a/g3/{i}": f"s1-{i}" for i in range(4)
    }
