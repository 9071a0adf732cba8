"""Start-time estimates on hand-made clusters: the simulation's exact answers, the fallback to
observed waits, and ``None`` with a reason where history is missing."""

from scheduler.core.bands import Band
from scheduler.core.estimate import (
    METHOD_SIMULATION,
    METHOD_WAIT_HISTORY,
    NEVER_REASON,
    RunHistory,
    conditioned_on_wait,
    estimate_starts,
    quantile,
    shape_key,
)
from scheduler.core.types import Resources
from tests.core.builders import GIB, NOW, cluster, job, running, worker

MINUTE = 60_000
TICK = 5_000
SHAPE = shape_key(Resources(1000, GIB))


def runs(job_id: str, *durations: int, user: str = "a", band: Band = Band.INTERACTIVE):
    return [(job_id, user, SHAPE, band, d) for d in durations]


def test_quantile_is_nearest_rank():
    values = list(range(1, 11))
    assert (quantile(values, 0.5), quantile(values, 0.9), quantile(values, 1.0)) == (5, 9, 10)
    assert quantile([7], 0.9) == 7


def test_a_single_free_slot_after_the_running_task_ends():
    """One slot, held by a task that started 4 min ago and always runs 10 min: the pending task
    starts at the first tick at or after the end, 6 minutes from now, in both runs."""
    snapshot = cluster(
        [worker("w", cpu=1, mem=1)], [job("/a/run"), job("/a/wait", submitted=NOW)], [running("/a/run/0", "w")]
    )
    history = RunHistory.build(runs("/a/run", *[10 * MINUTE] * 3))
    estimates = estimate_starts(snapshot, history, {"/a/run/0": NOW - 4 * MINUTE}, tick_ms=TICK)
    estimate = estimates["/a/wait/0"]
    assert (estimate.p50_ms, estimate.p90_ms, estimate.method) == (
        NOW + 6 * MINUTE,
        NOW + 6 * MINUTE,
        METHOD_SIMULATION,
    )
    assert estimate.as_of_ms == NOW


def test_a_queue_of_equal_tasks_with_known_durations_starts_in_waves():
    """Two slots, six equal pending tasks of 10 minutes each, one job at a time (submission
    order): tasks start in waves of two at 0, 10 and 20 minutes."""
    jobs = [job(f"/a/j{i}", cpu=1, mem=1, submitted=NOW + i) for i in range(6)]
    history = RunHistory.build(
        [
            (f"/a/j{i}", "a", shape_key(jobs[0].resources), Band.INTERACTIVE, 10 * MINUTE)
            for i in range(6)
            for _ in range(3)
        ]
    )
    snapshot = cluster([worker("w1", cpu=1, mem=1), worker("w2", cpu=1, mem=1)], jobs, now=NOW)
    estimates = estimate_starts(snapshot, history, {}, tick_ms=TICK)
    assert [estimates[f"/a/j{i}/0"].p50_ms - NOW for i in range(6)] == [
        0,
        0,
        10 * MINUTE,
        10 * MINUTE,
        20 * MINUTE,
        20 * MINUTE,
    ]
    assert all(e.p50_ms == e.p90_ms for e in estimates.values())


def test_p90_uses_the_pessimistic_durations():
    """Run times 5..50 min (median 25, p90 45): the waiting task's range is 25-45 min."""
    snapshot = cluster(
        [worker("w", cpu=1, mem=1)], [job("/a/run"), job("/a/wait", submitted=NOW)], [running("/a/run/0", "w")]
    )
    history = RunHistory.build(runs("/a/run", *[k * 5 * MINUTE for k in range(1, 11)]))
    estimate = estimate_starts(snapshot, history, {"/a/run/0": NOW}, tick_ms=TICK)["/a/wait/0"]
    assert (estimate.p50_ms - NOW, estimate.p90_ms - NOW) == (25 * MINUTE, 45 * MINUTE)


def test_no_history_gives_none_with_a_reason():
    snapshot = cluster([worker("w", cpu=1, mem=1)], [job("/a/run"), job("/a/wait")], [running("/a/run/0", "w")])
    estimate = estimate_starts(snapshot, RunHistory(), {}, tick_ms=TICK)["/a/wait/0"]
    assert estimate.p50_ms is None and estimate.p90_ms is None
    assert "not enough history" in estimate.reason


def test_a_task_that_fits_now_starts_now_even_without_history():
    snapshot = cluster([worker("w")], [job("/a/wait")])
    estimate = estimate_starts(snapshot, RunHistory(), {}, tick_ms=TICK)["/a/wait/0"]
    assert (estimate.p50_ms, estimate.p90_ms) == (NOW, NOW)


def test_a_running_task_past_every_recorded_duration_has_no_predicted_end():
    """The task has run 20 min; history only knows 10-min runs: no honest end, so no estimate."""
    snapshot = cluster([worker("w", cpu=1, mem=1)], [job("/a/run"), job("/a/wait")], [running("/a/run/0", "w")])
    history = RunHistory.build(runs("/a/run", *[10 * MINUTE] * 3))
    estimate = estimate_starts(snapshot, history, {"/a/run/0": NOW - 20 * MINUTE}, tick_ms=TICK)["/a/wait/0"]
    assert estimate.p50_ms is None and "not enough history" in estimate.reason


def test_thin_run_history_falls_back_to_observed_waits_longer_than_the_wait_so_far():
    """No run-time history, but the band's waits were 1..10 min; the task has waited 3 min:
    only the waits longer than 3 min count (4..10: median 7, p90 10)."""
    snapshot = cluster(
        [worker("w", cpu=1, mem=1)],
        [job("/a/run"), job("/a/wait", submitted=NOW - 3 * MINUTE)],
        [running("/a/run/0", "w")],
    )
    history = RunHistory.build([], [(Band.INTERACTIVE, k * MINUTE) for k in range(1, 11)])
    estimate = estimate_starts(snapshot, history, {}, tick_ms=TICK)["/a/wait/0"]
    submitted = NOW - 3 * MINUTE
    assert estimate.method == METHOD_WAIT_HISTORY
    assert (estimate.p50_ms - submitted, estimate.p90_ms - submitted) == (7 * MINUTE, 10 * MINUTE)


def test_a_task_no_worker_could_ever_hold_gets_no_estimate_whatever_its_band_waits():
    """The band's waits would give a range (as they do for the CPU job beside it), but no
    worker has a GPU, and no two workers could hold the gang: the queue marks both NEVER, so an
    estimate from the band's waits would contradict it (seen in the demo: "would start in about
    9-13 min" beside NEVER). Nothing but a change of the request or of the cluster starts them."""
    waits = [(Band.INTERACTIVE, k * MINUTE) for k in range(1, 11)]
    snapshot = cluster(
        [worker("w", cpu=1, mem=1), worker("v", cpu=1, mem=1, rack="r1")],
        [
            job("/a/run"),
            job("/a/cpu", submitted=NOW),
            job("/a/gpu", gpu=8, variant="h100", submitted=NOW),
            job("/a/gang", replicas=2, group_by="rack", submitted=NOW),
        ],
        [running("/a/run/0", "w")],
    )
    estimates = estimate_starts(snapshot, RunHistory.build([], waits), {}, tick_ms=TICK)
    assert estimates["/a/cpu/0"].method in (METHOD_SIMULATION, METHOD_WAIT_HISTORY)
    assert estimates["/a/cpu/0"].p90_ms is not None
    for task in ("/a/gpu/0", "/a/gang/0", "/a/gang/1"):
        assert (estimates[task].p50_ms, estimates[task].p90_ms, estimates[task].reason) == (None, None, NEVER_REASON)


def test_history_levels_prefer_the_job_then_user_and_shape_then_band():
    spec = job("/a/x")
    history = RunHistory.build(
        runs("/a/x", 1, 1, 1) + runs("/a/y", 2, 2, 2) + [("/b/z", "b", SHAPE, Band.INTERACTIVE, 3)] * 3
    )
    assert list(history.durations(spec)) == [1, 1, 1]
    assert set(history.durations(job("/a/new"))) == {1, 2}
    assert set(history.durations(job("/c/new", mem=7))) == {1, 2, 3}
    assert history.durations(job("/c/new", band="batch")) is None


def test_a_higher_band_arrival_in_the_queue_goes_first():
    """A BATCH and a PRODUCTION task wait for one slot held by PRODUCTION work (which neither
    may preempt): PRODUCTION takes it at the first end (10 min), BATCH after PRODUCTION's 30-min
    run (40 min)."""
    jobs = [
        job("/a/run", band="production", cpu=1, mem=1),
        job("/b/batch", band="batch", cpu=1, mem=1, submitted=NOW - 1),
        job("/c/prod", band="production", cpu=1, mem=1, submitted=NOW),
    ]
    history = RunHistory.build(
        runs("/a/run", *[10 * MINUTE] * 3, band=Band.PRODUCTION)
        + runs("/c/prod", *[30 * MINUTE] * 3, user="c", band=Band.PRODUCTION)
    )
    snapshot = cluster([worker("w", cpu=1, mem=1)], jobs, [running("/a/run/0", "w")])
    estimates = estimate_starts(snapshot, history, {"/a/run/0": NOW}, tick_ms=TICK)
    assert estimates["/c/prod/0"].p50_ms - NOW == 10 * MINUTE
    assert estimates["/b/batch/0"].p50_ms - NOW == 40 * MINUTE


def test_the_horizon_stops_the_simulation_and_says_so():
    snapshot = cluster([worker("w", cpu=1, mem=1)], [job("/a/run"), job("/a/wait")], [running("/a/run/0", "w")])
    history = RunHistory.build(runs("/a/run", *[10 * MINUTE] * 3))
    estimate = estimate_starts(snapshot, history, {}, tick_ms=TICK, out_of_time=lambda: True)["/a/wait/0"]
    assert estimate.p50_ms is None and "horizon" in estimate.reason


def test_a_preemption_in_the_simulation_starts_the_preemptor_now():
    """PRODUCTION work evicts INTERACTIVE work at once, as the real tick would."""
    jobs = [job("/a/run", cpu=1, mem=1), job("/c/prod", band="production", cpu=1, mem=1)]
    snapshot = cluster([worker("w", cpu=1, mem=1)], jobs, [running("/a/run/0", "w")])
    history = RunHistory.build(runs("/a/run", *[10 * MINUTE] * 3))
    assert estimate_starts(snapshot, history, {}, tick_ms=TICK)["/c/prod/0"].p50_ms == NOW


def test_future_arrivals_of_a_higher_band_go_ahead_in_the_simulation():
    """A PRODUCTION job is assumed to arrive in 5 minutes; the BATCH task waiting for the single
    slot then starts after that job's 20 minutes, not when the slot frees at 10."""
    jobs = [job("/a/run", band="production", cpu=1, mem=1), job("/b/wait", band="batch", cpu=1, mem=1)]
    snapshot = cluster([worker("w", cpu=1, mem=1)], jobs, [running("/a/run/0", "w")])
    history = RunHistory.build(
        runs("/a/run", *[10 * MINUTE] * 3, band=Band.PRODUCTION)
        + runs("/c/p", *[20 * MINUTE] * 3, user="c", band=Band.PRODUCTION)
    )
    arrival = job("/c/p", band="production", cpu=1, mem=1, submitted=NOW - 55 * MINUTE)
    alone = estimate_starts(snapshot, history, {}, tick_ms=TICK)["/b/wait/0"]
    busy = estimate_starts(snapshot, history, {}, tick_ms=TICK, arrivals=[(NOW + 5 * MINUTE, arrival)])["/b/wait/0"]
    assert alone.p50_ms - NOW == 10 * MINUTE
    assert busy.p50_ms - NOW == 30 * MINUTE


def test_conditioned_on_wait_takes_the_waits_longer_than_the_wait_so_far():
    minute = 60_000
    waits = [m * minute for m in (1, 2, 10, 20, 30, 40)]
    # Submitted at 0, still waiting at 15 minutes: of 20/30/40, median 30 and p90 40.
    assert conditioned_on_wait(waits, 0, 15 * minute) == (30 * minute, 40 * minute)
    # Never earlier than asked for.
    assert conditioned_on_wait(waits, 0, 15 * minute, earliest_ms=35 * minute) == (35 * minute, 40 * minute)
    # Waited past all but two: too few to say.
    assert conditioned_on_wait(waits, 0, 25 * minute) is None
