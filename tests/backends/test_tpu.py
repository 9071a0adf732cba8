"""TPU slice provisioning against the database and a fake TPU API, through the real
``google-cloud-tpu`` client: scale-up from unmet demand, tracking until ready, scale-down when
idle, the max, failures that back off and are recorded, and timeouts that leave nothing behind."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Attempt, BackendState, Job, Task, TpuSlice, Worker
from scheduler.provisioning.tpu import provision_tpu
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = pytest.mark.django_db

V5P = ("tpu", "v5p-8", 4)
ZONE_PATH = "/v2/projects/lab/locations/us-central2-b"


@pytest.fixture
def fake(gcp, cluster_config):
    cluster_config(kubernetes=False)
    return gcp[0]


def gang(name: str, replicas: int = 2) -> Job:
    return make_job(name, device=V5P, replicas=replicas, group_by="tpu-name", cpu=8, memory_gib=32)


def join(slice_name: str, hosts: int = 2) -> list[Worker]:
    """The slice's hosts boot and their agents register as workers."""
    workers = []
    for i in range(hosts):
        worker = make_worker(
            f"{slice_name}-w{i}", cpu=200, memory_gib=400, device=V5P, tpu_name=slice_name, tpu_worker_id=i
        )
        Worker.objects.filter(pk=worker.pk).update(backend="tpu")
        workers.append(worker)
    return workers


def finish_all(job: Job) -> None:
    now = timezone.now()
    Attempt.objects.filter(task__job=job).update(state="succeeded", finished_at=now)
    Task.objects.filter(job=job).update(state="succeeded", worker=None)
    Job.objects.filter(pk=job.pk).update(state="succeeded")


def at(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


def test_unmet_demand_creates_a_slice_with_the_exact_request(fake):
    gang("/alice/train")

    result = provision_tpu()

    assert len(result.created) == 1
    (name,) = result.created
    assert name.startswith("iris-v5p-")
    (create,) = fake.calls("POST")
    assert create.path == f"{ZONE_PATH}/nodes"
    assert create.query["nodeId"] == [name]
    assert create.body == {
        "acceleratorType": "v5p-8",
        "runtimeVersion": "v2-alpha-tpuv5",
        "description": "Iris scale group v5p",
        "labels": {"iris-managed": "true", "iris-scale-group": "v5p"},
    }
    row = TpuSlice.objects.get(name=name)
    assert (row.state, row.scale_group, row.zone) == ("creating", "v5p", "us-central2-b")
    assert row.operation.startswith("projects/lab/locations/us-central2-b/operations/")


def test_a_slice_being_created_counts_as_supply(fake):
    gang("/alice/train")
    provision_tpu()
    fake.requests.clear()

    result = provision_tpu()

    assert result.created == []
    assert fake.calls("POST") == []


def test_the_slice_is_tracked_until_ready_and_its_hosts_take_the_gang(fake):
    job = gang("/alice/train")
    (name,) = provision_tpu().created
    fake.make_ready(name, hosts=2)

    result = provision_tpu()

    assert result.ready == [name]
    assert TpuSlice.objects.get(name=name).state == "ready"
    join(name)
    run_tick(NOW_MS)
    assert sorted(Task.objects.filter(job=job).values_list("worker__name", flat=True)) == [f"{name}-w0", f"{name}-w1"]


def test_never_more_than_the_groups_max(fake):
    for i in range(3):
        gang(f"/alice/g{i}")

    result = provision_tpu()

    assert len(result.created) == 2
    assert result.groups["v5p"]["reason"] == "at max_slices (2)"
    assert provision_tpu().created == []
    assert TpuSlice.objects.filter(state="creating").count() == 2


def test_min_slices_are_kept_without_demand(fake, cluster_config):
    cluster_config(
        kubernetes=False,
        scale_groups=[
            {
                "name": "v5p",
                "accelerator_type": "v5p-8",
                "runtime_version": "v2-alpha-tpuv5",
                "min_slices": 1,
                "max_slices": 2,
            },
        ],
    )
    (name,) = provision_tpu().created
    fake.make_ready(name)
    provision_tpu()

    result = provision_tpu(now=at(3600))

    assert result.draining == [] and result.deleted == []
    assert TpuSlice.objects.get(name=name).state == "ready"


def test_an_idle_slice_is_drained_then_deleted_and_its_workers_leave(fake):
    job = gang("/alice/train")
    (name,) = provision_tpu().created
    fake.make_ready(name)
    provision_tpu()
    workers = join(name)
    run_tick(NOW_MS)
    provision_tpu(now=at(10))
    assert TpuSlice.objects.get(name=name).idle_since is None  # busy
    finish_all(job)

    provision_tpu(now=at(20))  # idle from now
    assert provision_tpu(now=at(300)).draining == []  # not idle long enough (600 s)
    drained = provision_tpu(now=at(700))

    assert drained.draining == [name]
    assert set(Worker.objects.filter(pk__in=[w.pk for w in workers]).values_list("draining", flat=True)) == {True}
    assert fake.calls("DELETE") == []

    deleted = provision_tpu(now=at(720))

    assert deleted.deleted == [name]
    assert [r.path for r in fake.calls("DELETE")] == [f"{ZONE_PATH}/nodes/{name}"]
    assert set(Worker.objects.filter(pk__in=[w.pk for w in workers]).values_list("healthy", flat=True)) == {False}
    provision_tpu(now=at(740))
    assert TpuSlice.objects.get(name=name).state == "deleted"


def test_a_draining_slice_is_taken_back_when_work_arrives(fake):
    job = gang("/alice/train")
    (name,) = provision_tpu().created
    fake.make_ready(name)
    provision_tpu()
    join(name)
    run_tick(NOW_MS)
    finish_all(job)
    provision_tpu(now=at(10))
    assert provision_tpu(now=at(700)).draining == [name]

    gang("/bob/next")
    result = provision_tpu(now=at(710))

    assert result.created == [] and result.deleted == []
    assert TpuSlice.objects.get(name=name).state == "ready"
    assert set(Worker.objects.filter(name__startswith=name).values_list("draining", flat=True)) == {False}


def test_a_failed_creation_is_recorded_and_the_group_backs_off(fake):
    gang("/alice/train")
    fake.fail("POST", "/nodes$", status=500)

    first = provision_tpu()

    (name,) = first.failed
    row = TpuSlice.objects.get(name=name)
    assert row.state == "failed" and "InternalServerError" in row.last_error
    state = BackendState.objects.get(name="tpu")
    assert state.healthy is False and "InternalServerError" in state.last_error
    # Within the backoff (60 s after one failure): no new request.
    again = provision_tpu(now=at(30))
    assert again.created == [] and again.groups["v5p"]["reason"].startswith("backing off after 1 failed")
    assert len(fake.calls("POST")) == 1
    # After it: a new try, which succeeds.
    later = provision_tpu(now=at(90))
    assert len(later.created) == 1
    assert BackendState.objects.get(name="tpu").healthy is True


def test_an_operation_that_fails_marks_the_slice_failed(fake):
    gang("/alice/train")
    (name,) = provision_tpu().created
    fake.fail_creation(name, "There is no more capacity in the zone")

    result = provision_tpu()

    assert result.failed == [name]
    assert TpuSlice.objects.get(name=name).last_error == "There is no more capacity in the zone"


def test_a_creation_that_timed_out_is_failed_and_the_node_it_left_is_deleted(fake):
    gang("/alice/train")
    fake.fail("POST", "/nodes$", status=0, delay=3)  # answered after the client gave up

    first = provision_tpu()

    (name,) = first.failed
    assert "Timeout" in TpuSlice.objects.get(name=name).last_error
    # The server did create it; the next pass finds an unclaimed managed node and deletes it.
    deadline = time.monotonic() + 5
    while fake.node(name) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.node(name) is not None
    second = provision_tpu(now=at(10))
    assert name in second.deleted
    assert fake.node(name) is None


def test_a_slice_not_ready_in_time_is_given_up(fake):
    gang("/alice/train")
    (name,) = provision_tpu().created

    result = provision_tpu(now=at(1900))

    assert result.failed == [name]
    assert "not ready after 1800s" in TpuSlice.objects.get(name=name).last_error
    assert fake.node(name) is None


def test_a_preempted_spot_slice_loses_its_workers_and_their_tasks_retry(fake):
    job = gang("/alice/train")
    (name,) = provision_tpu().created
    fake.make_ready(name)
    provision_tpu()
    join(name)
    run_tick(NOW_MS)
    Task.objects.filter(job=job).update(state="running")
    Attempt.objects.filter(task__job=job).update(state="running")
    fake.preempt(name)

    result = provision_tpu(now=at(10))

    assert name in result.deleted
    assert TpuSlice.objects.get(name=name).state == "deleted"
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"pending"}


def test_queued_resources_are_asked_for_with_spot(fake, cluster_config):
    cluster_config(
        kubernetes=False,
        tpu={"provisioning": "queued_resources"},
        scale_groups=[
            {
                "name": "v5p",
                "accelerator_type": "v5p-8",
                "runtime_version": "v2-alpha-tpuv5",
                "spot": True,
                "max_slices": 1,
                "hosts_per_slice": 2,
            },
        ],
    )
    gang("/alice/train")

    (name,) = provision_tpu().created

    (create,) = fake.calls("POST")
    assert create.path == f"{ZONE_PATH}/queuedResources"
    assert create.query["queuedResourceId"] == [name]
    assert create.body == {
        "tpu": {
            "nodeSpec": [
                {
                    "parent": "projects/lab/locations/us-central2-b",
                    "nodeId": name,
                    "node": {
                        "acceleratorType": "v5p-8",
                        "runtimeVersion": "v2-alpha-tpuv5",
                        "description": "Iris scale group v5p",
                        "labels": {"iris-managed": "true", "iris-scale-group": "v5p"},
                    },
                }
            ]
        },
        "spot": {},
    }
    fake.make_ready(name, hosts=2)
    assert provision_tpu().ready == [name]


def test_the_boot_script_starts_the_agent_with_the_slice_attributes(fake, cluster_config):
    cluster_config(
        kubernetes=False,
        tpu={
            "agent_command": "python manage.py iris_worker --name {tpu_name}-w{worker_id_var} --cpu 200 "
            "--memory 400Gi --tpu {variant}:{chips} --attribute tpu-name={tpu_name} "
            "--attribute tpu-worker-id={worker_id_var} --backend tpu",
        },
    )
    gang("/alice/train")
    (name,) = provision_tpu().created
    script = fake.calls("POST")[0].body["metadata"]["startup-script"]
    assert script.startswith("#!/bin/bash\n")
    assert f"--attribute tpu-name={name} " in script
    assert "--tpu v5p-8:4 " in script and script.rstrip().endswith("--backend tpu")
    assert '--attribute tpu-worker-id="$(curl' in script and "agent-worker-number" in script


def test_jobs_no_group_serves_are_reported(fake):
    make_job("/alice/v6", device=("tpu", "v6e-8", 4))
    result = provision_tpu()
    assert result.unserved == ["/alice/v6"]
    assert result.created == []


def test_a_disabled_tpu_backend_does_nothing(gcp, cluster_config):
    cluster_config(kubernetes=False, tpu=False, scale_groups=[])
    gang("/alice/train")
    assert provision_tpu().enabled is False
    assert gcp[0].requests == []
    assert BackendState.objects.get(name="tpu").enabled is False
