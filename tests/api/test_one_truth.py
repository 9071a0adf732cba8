"""One truth for every explanation (issue 12): after a real tick over a generated cluster, every
pending task's position and band count are the same in the queue API, the explain endpoint and
the numbers inside the rendered reason text; band counts sum to what is pending; the scheduler
state page shows the newest tick record's count. And the job page tells bands honestly."""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.bands import Band
from scheduler.board.read import forget as forget_board
from scheduler.models import Job, PreemptionEvent, Task, TickRecord, UserBudget, Worker
from scheduler.store.cluster_rows import forget_cluster_rows
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running, token_client


@pytest.fixture(autouse=True)
def _fresh_queue_index():
    """Ticks here all run at NOW_MS, and SQLite reuses a rolled-back tick's pk: the per-process
    queue index (keyed by pk and now_ms) must not carry over from another test."""
    forget_board()
    yield
    forget_board()


PLACE = re.compile(r"position ([\d,]+) of ([\d,]+) in (\w+) as of tick (\d+)")

JOBS = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob"]),
        st.sampled_from([Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH]),
        st.integers(1, 7),  # replicas
        st.sampled_from([1, 2, 4, 8]),  # cores
        st.booleans(),  # gang
    ),
    min_size=1,
    max_size=6,
)
CLUSTERS = st.tuples(
    st.lists(st.sampled_from([2, 4, 8]), min_size=0, max_size=4),  # workers' cores
    JOBS,
    st.integers(0, 3),  # tasks of alice already running (over her budget if > 1)
)


def build(workers, jobs, running):
    Task.objects.all().delete()
    Job.objects.all().delete()
    Worker.objects.all().delete()
    TickRecord.objects.all().delete()
    forget_cluster_rows()
    forget_board()
    UserBudget.objects.update_or_create(user_id="alice", defaults={"budget_limit": 6, "max_band": Band.INTERACTIVE})
    for i, cores in enumerate(workers):
        make_worker(f"w{i}", cpu=cores, memory_gib=64, pool="a" if i % 2 else "b")
    if running and workers:
        held = make_job("/alice/held", replicas=running, cpu=0.5)
        host = Worker.objects.order_by("name").first()
        for i in range(running):
            start_running(held, host, index=i)
    for n, (user, band, replicas, cores, gang) in enumerate(jobs):
        make_job(
            f"/{user}/j{n}", band=band, replicas=replicas, cpu=cores, group_by="pool" if gang and replicas > 1 else None
        )


@pytest.mark.django_db
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(CLUSTERS)
def test_queue_explain_reason_text_and_state_page_agree_after_a_tick(alice, ada, cluster):
    build(*cluster)
    run_tick(NOW_MS)
    tick = TickRecord.objects.latest("pk")
    api = token_client(ada)

    page = api.get("/api/v1/queue/?page_size=500").json()
    assert page["tick"] == tick.pk
    entries = page["results"]
    assert sum(page["band_counts"].values()) == len(entries) == tick.left_pending
    pending_now = Task.objects.filter(state="pending").count()
    assert tick.left_pending == pending_now  # nothing moved since the tick

    seen_per_band: dict[str, int] = {}
    for e in entries:
        seen_per_band[e["band"]] = seen_per_band.get(e["band"], 0) + 1
        # Positions are 1..N in order within each band, N the band count.
        assert e["position"] == seen_per_band[e["band"]]
        assert e["band_pending"] == page["band_counts"][e["band"]]
        reason = e["pending_reason"]
        assert (reason["position"], reason["band_pending"], reason["tick"]) == (
            e["position"],
            e["band_pending"],
            tick.pk,
        )
        match = PLACE.search(reason["text"])
        assert match, reason["text"]
        assert (int(match[1].replace(",", "")), int(match[2].replace(",", "")), match[3], int(match[4])) == (
            e["position"],
            e["band_pending"],
            e["band"].upper(),
            tick.pk,
        )

    by_task = {e["task"]: e for e in entries}
    for job in Job.objects.exclude(name="/alice/held"):
        explained = api.get(f"/api/v1/jobs{job.name}:explain").json()
        assert explained["tick"] == tick.pk
        queued = [t for t in explained["tasks"] if t["position"] is not None]
        for t in queued:
            e = by_task[t["task"]]
            assert (t["band"], t["position"], t["band_pending"]) == (e["band"], e["position"], e["band_pending"])
            assert t["pending_reason"]["text"] == e["pending_reason"]["text"]
        if queued:
            first = min(queued, key=lambda t: (int(Band.parse(t["band"])), t["position"]))
            assert (explained["position"], explained["band_pending"], explained["queued_band"]) == (
                first["position"],
                first["band_pending"],
                first["band"],
            )
            assert explained["pending_reason"]["text"] == first["pending_reason"]["text"]
        assert {t["task"] for t in explained["tasks"] if t["state"] == "pending"} == {t["task"] for t in queued}

    ada_console = token_client(ada)
    ada_console.force_login(ada)
    html = ada_console.get("/scheduler/").content.decode()
    assert f'<strong id="left-pending">{tick.left_pending:,}</strong>' in html
    assert f'data-tick="{tick.pk}">{tick.left_pending:,}</td>' in html


@pytest.mark.django_db
def test_job_header_counts_running_and_pending_bands_and_labels_both_spends(alice, ada):
    UserBudget.objects.create(user_id="alice", budget_limit=30, max_band=Band.INTERACTIVE)
    worker = make_worker("w1", cpu=4, memory_gib=16)
    job = make_job("/alice/train", replicas=6, cpu=1, memory_gib=1)
    for i in range(4):
        start_running(job, worker, index=i, band=Band.INTERACTIVE)
    make_job("/alice/big", replicas=2, cpu=4, memory_gib=4)  # 2 × 24 points: spend 48 once running
    big = Job.objects.get(name="/alice/big")
    other = make_worker("w2", cpu=8, memory_gib=16)
    for i in range(2):
        start_running(big, other, index=i, band=Band.INTERACTIVE)
    run_tick(NOW_MS)
    tick = TickRecord.objects.latest("pk")

    explained = token_client(alice).get("/api/v1/jobs/alice/train:explain").json()
    spend = explained["spend_at_tick"]
    assert spend > 30
    assert explained["bands_text"] == (
        f"4 running as INTERACTIVE · 2 pending as BATCH: over budget, spend {spend} > limit 30"
    )
    client = token_client(alice)
    client.force_login(alice)
    html = client.get("/jobs/alice/train/").content.decode()
    assert escape(explained["bands_text"]) in html
    assert "(live)" in html and f"(at tick {tick.pk}, what the scheduler used)" in html


@pytest.mark.django_db
def test_a_victim_row_says_the_band_it_was_stamped_at_and_why(alice, ada):
    UserBudget.objects.create(user_id="bob", budget_limit=1, max_band=Band.INTERACTIVE)
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = make_job("/bob/old", band=Band.INTERACTIVE, cpu=4)
    start_running(victim, worker, band=Band.BATCH)  # stamped BATCH: bob was over budget then
    make_job("/bob/new", band=Band.INTERACTIVE, cpu=4)
    UserBudget.objects.filter(user_id="bob").update(budget_limit=0)
    run_tick(NOW_MS)
    assert PreemptionEvent.objects.count() == 1

    explained = token_client(ada).get("/api/v1/jobs/bob/old:explain").json()
    (event,) = explained["preemptions"]
    assert event["victim_band"] == "batch"
    assert event["victim_stamp"] == "stamped BATCH at assignment: bob was over budget then (requested INTERACTIVE)"


@pytest.mark.django_db
def test_not_now_lists_who_holds_the_matching_workers_and_whether_they_can_be_preempted(alice, ada):
    w1, w2 = make_worker("w1", cpu=4, memory_gib=16), make_worker("w2", cpu=4, memory_gib=16)
    make_worker("small", cpu=1, memory_gib=16)  # cannot hold it: not a matching worker
    bob = make_job("/bob/dev", band=Band.INTERACTIVE, cpu=4)
    start_running(bob, w1)
    carol = make_job("/carol/sweep", band=Band.BATCH, replicas=1, cpu=4)
    start_running(carol, w2)
    make_job("/alice/train", band=Band.INTERACTIVE, cpu=4)

    f = token_client(alice).get("/api/v1/jobs/alice/train:explain").json()["feasibility"]
    assert (f["verdict"], f["matching_workers"], f["healthy_workers"]) == ("not_now", 2, 3)
    # Held by names only what it may evict; bob's work is in its own band: summed apart.
    assert f["held_by"] == [{"user": "carol", "band": "batch", "tasks": 1, "preemptible": True}]
    assert f["held_by_others"] == {"tasks": 1, "users": ["bob"]}


@pytest.mark.django_db
def test_batch_work_preempts_nothing(alice, ada):
    w1 = make_worker("w1", cpu=4, memory_gib=16)
    start_running(make_job("/bob/low", band=Band.BATCH, cpu=4), w1)
    make_job("/alice/later", band=Band.BATCH, cpu=4)
    f = token_client(alice).get("/api/v1/jobs/alice/later:explain").json()["feasibility"]
    assert f["held_by"] == []
    assert f["held_by_others"] == {"tasks": 1, "users": ["bob"]}


@pytest.mark.django_db
def test_priority_factors_list_band_turn_and_job_keys_in_order_with_the_resulting_position(alice, ada):
    make_worker("w1", cpu=1, memory_gib=4)
    start_running(make_job("/alice/warm", cpu=1), Worker.objects.get())
    make_job("/bob/a", replicas=2, cpu=1)
    make_job("/alice/b", replicas=2, cpu=1)
    run_tick(NOW_MS)
    explained = token_client(alice).get("/api/v1/jobs/alice/b:explain").json()
    priority = explained["priority"]
    assert [f["factor"] for f in priority["factors"]] == [
        "effective_band",
        "round_robin_turn",
        "own_tasks_ahead",
        "requested_band",
        "depth",
        "root_submitted_at_ms",
        "submitted_at_ms",
        "task_index",
    ]
    turn = priority["factors"][1]
    # bob spends nothing, alice runs one task: bob goes first.
    assert [u["user"] for u in turn["users"]] == ["bob", "alice"] and turn["value"] == 2
    assert (priority["position"], priority["band_pending"]) == (explained["position"], explained["band_pending"])
    assert priority["position"] == 2  # bob's first task, then alice's


@pytest.mark.django_db
def test_priority_factors_read_as_people_expect_the_same_in_the_api_the_console_and_the_cli(alice):
    make_worker("w1", cpu=1, memory_gib=4)
    start_running(make_job("/alice/warm", cpu=1), Worker.objects.get())
    make_job("/bob/a", replicas=2, cpu=1, submitted_at_ms=NOW_MS - 90_000)
    make_job("/alice/b", replicas=2, cpu=1, submitted_at_ms=NOW_MS - 3_723_000)
    run_tick(NOW_MS)
    tick = TickRecord.objects.latest("pk")
    explained = token_client(alice).get("/api/v1/jobs/alice/b:explain").json()
    factors = {f["factor"]: f for f in explained["priority"]["factors"]}
    assert factors["effective_band"]["label"] == "Effective band" and factors["effective_band"]["text"] == "INTERACTIVE"
    assert factors["round_robin_turn"]["text"] == "2nd of 2 users"
    assert (
        "(spend at tick" in factors["round_robin_turn"]["detail"]
        and "bob 0, alice " in factors["round_robin_turn"]["detail"]
    )
    assert factors["depth"]["text"] == "1 (root job)"
    # 1,800,000,000,000 ms is 2027-01-15T08:00:00Z; the age is counted to the tick that ordered it.
    submitted = factors["submitted_at_ms"]
    assert submitted["value"] == NOW_MS - 3_723_000
    assert submitted["text"] == f"2027-01-15T06:57:57Z, 1h 2m before tick {tick.pk}"
    assert explained["priority"]["text"] == f"position 2 of 4 in INTERACTIVE as of tick {tick.pk}"

    client = token_client(alice)
    client.force_login(alice)
    html = client.get("/jobs/alice/b/").content.decode()
    for f in factors.values():
        assert f'<tr data-factor="{f["factor"]}"><th>{escape(f["label"])}</th>' in html
        if f["factor"] not in ("effective_band", "requested_band"):
            assert f"<td>{escape(f['text'])}" in html
        if f.get("detail"):
            assert f'<div class="small muted detail">{escape(f["detail"])}</div>' in html
    assert "effective_band" not in html.split('id="priority"')[1].split("</dd>")[0].replace(
        'data-factor="effective_band"', ""
    )

    from iris_cli.formatting import priority_text

    printed = priority_text(explained["priority"])
    assert printed.splitlines()[0] == f"Priority of /alice/b/0: {explained['priority']['text']}"
    for f in factors.values():
        assert f["label"] in printed and f["text"] in printed


V5P_POOL_CONFIG = (
    '[tpu]\nproject = "lab"\nzone = "us-central2-b"\n\n'
    '[[scale_groups]]\nname = "v5p-pool"\naccelerator_type = "v5p-8"\nruntime_version = "v2"\n'
    "max_slices = 2\nhosts_per_slice = 2\nchips_per_host = 4\n"
)


@pytest.fixture
def cluster_config_text(tmp_path, settings):
    """Writes the cluster config (TOML text) and makes the process read it afresh. Nothing here
    provisions, so no TPU API is called."""
    from scheduler.foundation.cluster_config import _cached

    path = tmp_path / "cluster.toml"
    settings.CLUSTER_CONFIG = str(path)

    def configure(text: str) -> None:
        path.write_text(text)
        _cached.cache_clear()
        forget_cluster_rows()
        forget_board()

    yield configure
    _cached.cache_clear()


def first_queued(client) -> dict:
    return client.get("/api/v1/queue/?page_size=50").json()["results"][0]


@pytest.mark.django_db
def test_a_job_a_scale_group_could_create_a_slice_for_says_so_in_the_queue_the_job_page_and_explain(
    alice, ada, cluster_config_text
):
    cluster_config_text(V5P_POOL_CONFIG)
    make_worker("cpu-0", cpu=8, memory_gib=32)
    make_worker("v5p-small-0", cpu=8, memory_gib=32, device=("tpu", "v5p-8", 2))  # too few chips
    make_job("/alice/tpu", replicas=2, cpu=1, device=("tpu", "v5p-8", 4), group_by="tpu-name")
    run_tick(NOW_MS)

    queued = first_queued(token_client(ada))["pending_reason"]
    assert (queued["code"], queued["group"]) == ("scale_group", "v5p-pool")
    assert "scale group 'v5p-pool' can create one" in queued["text"]
    explained = token_client(alice).get("/api/v1/jobs/alice/tpu:explain").json()
    assert (explained["feasibility"]["verdict"], explained["feasibility"]["scale_group"]) == ("scale_group", "v5p-pool")
    assert explained["pending_reason"]["text"] == queued["text"]
    client = token_client(alice)
    client.force_login(alice)
    html = client.get("/jobs/alice/tpu/").content.decode()
    assert 'data-code="scale_group"' in html and 'data-verdict="scale_group"' in html
    assert escape(queued["text"]) in html

    # TPU provisioning off: no slice will come. The queue names the requirement no worker meets
    # (the small host has no 'tpu-name' group), the verdict is "never".
    cluster_config_text("[tpu]\nenabled = false\n")
    run_tick(NOW_MS + 1000)
    queued = first_queued(token_client(ada))["pending_reason"]
    explained = token_client(alice).get("/api/v1/jobs/alice/tpu:explain").json()
    assert (queued["code"], explained["feasibility"]["verdict"]) == ("gang_group_too_small", "never")
    assert explained["pending_reason"]["text"] == queued["text"]
