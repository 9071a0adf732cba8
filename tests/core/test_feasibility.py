"""Can this job ever run? (issue 12 §3): each requirement with how many healthy workers meet it
alone and with every requirement before it; the largest matching worker; a TPU scale group that
could create the slice; and the tick's "never" reason for a shape no idle worker could hold."""

from scheduler.core.decision import decide
from scheduler.core.demand import GroupSpec
from scheduler.core.explain import cause_text, reason_record
from scheduler.core.feasibility import analyse_job
from tests.core.builders import GIB, cluster, eq, job, tpu_slice, worker

SIX = [worker(f"w{i}", cpu=8, mem=32, zone="a" if i < 4 else "b") for i in range(6)]


def rows(analysis):
    return [(r.kind, r.label, r.alone, r.cumulative) for r in analysis.requirements]


def test_a_job_bigger_than_any_worker_never_fits_and_says_why():
    decision = decide(cluster(workers=SIX, jobs=[job("/a/huge", cpu=1000)]))
    reason = decision.pending_reasons["/a/huge/0"]
    assert reason.code == "never_fits"
    assert reason.text() == (
        "Never fits on the cluster as it is; 1,000 cores per task: 0 healthy workers have it, 0 with every "
        "requirement before it; largest matching worker: 8 cores, 32 GiB"
    )
    assert cause_text(reason_record(reason)) == reason.cause.text()


def test_a_job_that_fits_an_idle_worker_is_not_now_rather_than_never():
    busy = cluster(workers=[worker("w0", cpu=8)], jobs=[job("/a/first", cpu=8), job("/b/second", cpu=8, submitted=1)])
    assert decide(busy).pending_reasons["/b/second/0"].code == "waiting_behind"


def test_each_requirement_counts_workers_alone_and_with_those_before_it():
    spec = job("/a/j", cpu=16, mem=16, constraints=[eq("zone", "b")])
    analysis = analyse_job(spec, SIX + [worker("big", cpu=32, mem=8, zone="a")])
    assert rows(analysis) == [("constraint", "zone=b", 2, 2), ("cpu", "cpu", 1, 0), ("memory", "memory", 6, 0)]
    assert analysis.never and analysis.largest == (8000, 32 * GIB, 0)


def test_device_type_variant_and_count_are_requirements():
    gpus = [worker("g0", gpu=4, variant="h100"), worker("g1", gpu=8, variant="a100")]
    analysis = analyse_job(job("/a/j", gpu=8, variant="h100"), SIX + gpus)
    assert rows(analysis)[:3] == [
        ("constraint", "device-type=gpu", 2, 2),
        ("constraint", "device-variant=h100", 1, 1),
        ("devices", "8 GPUs", 1, 0),
    ]
    assert analysis.never and analysis.largest == (8000, 32 * GIB, 4)


def test_a_gang_needs_a_big_enough_group():
    analysis = analyse_job(job("/a/g", replicas=5, group_by="zone"), SIX)
    assert rows(analysis)[-1] == ("group", "5 workers in one 'zone' group", 4, 4)
    assert analysis.never


def test_a_tpu_job_no_slice_fits_is_not_never_when_a_scale_group_could_create_one():
    spec = job("/a/tpu", replicas=4, tpu=4, variant="v5p-8", group_by="tpu-name")
    analysis = analyse_job(spec, SIX, [GroupSpec("v5p-pool", "v5p-8", "us-east5-a")])
    assert analysis.scale_group == "v5p-pool" and not analysis.never
    assert analyse_job(spec, SIX, [GroupSpec("v6e-pool", "v6e-8", "us-east5-a")]).never


def test_a_tpu_job_fits_an_existing_slice():
    spec = job("/a/tpu", replicas=4, tpu=4, variant="v5p", group_by="tpu-name")
    analysis = analyse_job(spec, SIX + tpu_slice("s1"))
    assert not analysis.never and analysis.matching == 4
