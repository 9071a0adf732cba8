"""The console shows where work runs: each backend's health, last sync and errors, the live TPU
slices (workers and scheduler pages), and on a job's page its backend and each attempt's log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.models import Attempt, BackendState, Job, TpuSlice, Worker
from tests.personas import make_worker, run_tasks, submit
from tests.web.test_pages import text

pytestmark = pytest.mark.django_db


def make_backends_and_slices(n: int) -> None:
    """A failing Kubernetes backend, a healthy TPU backend, and ``n`` slices (one failed)."""
    now = timezone.now()
    BackendState.objects.update_or_create(
        name="kubernetes",
        defaults=dict(
            enabled=True,
            healthy=False,
            last_sync_at=now,
            last_ok_at=now - timedelta(hours=2),
            last_error="connection refused by kube-apiserver",
            last_error_at=now,
            consecutive_errors=3,
        ),
    )
    BackendState.objects.update_or_create(
        name="tpu",
        defaults=dict(
            enabled=True,
            healthy=True,
            last_sync_at=now,
            last_ok_at=now,
        ),
    )
    start = TpuSlice.objects.count()
    for i in range(start, start + n):
        TpuSlice.objects.create(
            name=f"iris-v5e-{i:03d}",
            scale_group="v5e",
            zone="us-central2-b",
            accelerator_type="v5litepod-8",
            state="ready" if i else "creating",
            created_at=now,
        )
    TpuSlice.objects.create(
        name=f"iris-gone-{start}",
        scale_group="v5e",
        zone="us-central2-b",
        accelerator_type="v5litepod-8",
        state="failed",
        created_at=now,
        last_error="quota",
    )


@pytest.mark.parametrize(("url", "persona"), [("/workers/", "alice"), ("/scheduler/", "olivia")])
def test_backend_health_last_sync_errors_and_live_slices_are_shown(clients, url, persona):
    make_worker("w1")
    make_backends_and_slices(2)
    page = text(clients[persona].get(url))
    assert "Backends" in page and "TPU slices" in page
    assert "kubernetes unhealthy" in page and "3 in a row" in page and "connection refused by kube-apiserver" in page
    assert "tpu healthy" in page
    assert (
        "local healthy 1 of 1 worker heartbeating 1 no sync pass: its agents report in" in page
    )  # known by its workers only
    assert "iris-v5e-000" in page and "iris-v5e-001 v5e v5litepod-8 us-central2-b ready" in page
    assert "iris-gone" not in page  # finished slices are not live


@pytest.mark.parametrize(("url", "persona"), [("/workers/", "alice"), ("/scheduler/", "olivia")])
def test_backend_panels_run_a_fixed_number_of_queries(clients, url, persona):
    client = clients[persona]
    make_worker("w1")
    make_backends_and_slices(2)
    with CaptureQueriesContext(connection) as small:
        assert client.get(url).status_code == 200
    for i in range(30):
        make_worker(f"tpu-{i}")
    Worker.objects.filter(name__startswith="tpu-").update(backend="tpu")
    make_backends_and_slices(60)
    with CaptureQueriesContext(connection) as large:
        page = text(client.get(url))
    assert len(small) == len(large), [q["sql"] for q in large.captured_queries]
    assert "more live slices not shown" in page


def test_job_page_shows_its_backend_and_links_each_attempt_to_its_log(clients, alice):
    job = submit(alice, "train", replicas=1)
    # Kubernetes is off here, so no worker can change where it runs: routed at submission.
    assert "Runs on Registered workers" in text(clients["alice"].get("/jobs/alice/train/"))
    Job.objects.filter(pk=job.pk).update(route="")  # as a job Kubernetes could take, before its first tick
    assert "Runs on not routed yet" in text(clients["alice"].get("/jobs/alice/train/"))
    worker = make_worker("w1")
    run_tasks(job, worker)
    task = job.tasks.get()
    Attempt.objects.create(
        task=task, number=2, worker=worker, state="running", band=job.band, created_at=timezone.now()
    )
    Job.objects.filter(pk=job.pk).update(route="workers")
    html = clients["alice"].get("/jobs/alice/train/").content.decode()
    assert f'href="/logs/{task.pk}/1/"' in html and f'href="/logs/{task.pk}/2/"' in html
    assert "Runs on Registered workers" in text(clients["alice"].get("/jobs/alice/train/"))
    Job.objects.filter(pk=job.pk).update(route="kubernetes")
    assert "Runs on Kubernetes" in text(clients["alice"].get("/jobs/alice/train/"))


@pytest.mark.parametrize(("url", "persona"), [("/workers/", "alice"), ("/scheduler/", "olivia")])
def test_with_no_provisioned_slice_the_page_says_where_self_registered_slice_hosts_are(clients, url, persona):
    """Beside four ``tpu-name=slice-a`` hosts it said only "No live TPU slices"; and backend
    ``local`` read "healthy" with "last sync never, last success never"."""
    for i in range(4):
        make_worker(f"slice-a-{i}", device=("tpu", "v5p-8", 4), tpu_name="slice-a")
    page = text(clients[persona].get(url))
    assert "No TPU slices provisioned from a scale group" in page
    assert "register on their own (with a tpu-name attribute" in page
    assert "4 of 4 workers heartbeating" in page
    assert "never" not in page.split("Backends", 1)[1].split("TPU slices", 1)[0]
