"""The uplift preview against the next real tick: on generated clusters (rows, real ticks until
the cluster is at rest), ``POST uplifts/<id>:preview`` predicts the bands and positions bob's
tasks have after the grant is approved and the next tick runs; and who may ask."""

from __future__ import annotations

import random

import pytest

from scheduler.board.read import forget, queue_index
from scheduler.budgets.writes import approve_uplift, request_uplift
from scheduler.core.bands import Band
from scheduler.models import Task, TickRecord, UserBudget
from scheduler.store import clock
from scheduler.tick.run import run_tick
from tests.personas import make_job, make_worker, run_tasks, token_client

pytestmark = pytest.mark.django_db

USERS = ["alice", "carol", "dave", "bob"]


def generated_cluster(seed: int) -> None:
    """Workers nearly full of running work; everyone else's pending work too big for what is
    left; bob over his 1-point limit with pending INTERACTIVE jobs of several replicas (some
    held back by the per-job cap) and a BATCH one. No BATCH work runs, so nothing can be
    preempted for bob: the preview's positions are then the whole answer."""
    rng = random.Random(seed)
    UserBudget.objects.create(user_id="bob", budget_limit=1, max_band=int(Band.INTERACTIVE))
    for w in range(rng.randint(3, 7)):
        worker = make_worker(f"w{w:02d}", cpu=8, memory_gib=64)
        used = 8 - rng.choice([0, 1, 2, 3])
        k = 0
        while used > 0:
            size = min(used, rng.choice([1, 2, 4]))
            owner = rng.choice(USERS)
            job = make_job(f"/{owner}/run-{w}-{k}", cpu=size, memory_gib=1)
            run_tasks(job, worker)
            used -= size
            k += 1
    if not Task.objects.filter(job__user="bob", state="running").exists():
        job = make_job("/bob/run-extra", cpu=1, memory_gib=1)
        run_tasks(job, make_worker("w-extra", cpu=1, memory_gib=1))
    for owner in USERS:
        for j in range(rng.randint(1, 3)):
            band = Band.BATCH if rng.random() < 0.3 and (owner, j) != ("bob", 0) else Band.INTERACTIVE
            make_job(f"/{owner}/p{j}", band=band, replicas=rng.randint(1, 7), cpu=rng.choice([4, 5, 6]), memory_gib=1)


def next_ms() -> int:
    """A tick time after an approval made this millisecond: the grant starts at the approval's
    microsecond, and a tick at the truncated millisecond would not see it yet."""
    return clock.now_ms() + 1


def tick_to_rest() -> None:
    for _ in range(4):
        outcome = run_tick(clock.now_ms())
        record = TickRecord.objects.get(pk=outcome.tick_id)
        if not record.assigned and not record.preempted:
            return
    pytest.fail("the generated cluster did not come to rest")


def bob_in_queue() -> dict[str, tuple[str, int, int]]:
    """{task: (band, position, band count)} of bob's queued tasks in the newest tick's queue."""
    forget()
    index = queue_index()
    out = {}
    for rank, owners in index.owner.items():
        for i, owner in enumerate(owners):
            if owner == "bob":
                out[index.ids[rank][i]] = (Band(rank).wire, i + 1, len(owners))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_preview_predicts_the_next_ticks_bands_and_positions(seed, ada, bob):
    generated_cluster(seed)
    tick_to_rest()
    grant = request_uplift(bob, budget_limit=0, reason="deadline", duration_seconds=3600)
    before = bob_in_queue()

    response = token_client(ada).post(f"/api/v1/uplifts/{grant.pk}:preview", {}, format="json")
    assert response.status_code == 200, response.content
    preview = response.json()
    assert preview["at_rest"] is True
    assert preview["preemptible"] == {}
    assert preview["tasks"], "the generated cluster moves some of bob's tasks"

    approve_uplift(ada, grant.pk)
    run_tick(next_ms())
    after = bob_in_queue()

    for move in preview["tasks"]:
        assert before[move["task"]] == (move["band_before"], move["position_before"], move["band_pending_before"])
        assert move["starts_on"] is None
        assert after[move["task"]] == (move["band_after"], move["position_after"], move["band_pending_after"])
    # Every task of bob's that changed band is in the preview, and only those.
    changed = {t for t, (band, _, _) in after.items() if before[t][0] != band}
    assert {m["task"] for m in preview["tasks"]} == changed
    assert preview["unchanged"] == len(before) - len(changed)


def test_preview_counts_the_batch_work_the_grant_lets_bob_preempt(ada, bob):
    UserBudget.objects.create(user_id="bob", budget_limit=1, max_band=int(Band.INTERACTIVE))
    worker = make_worker("w1", cpu=8, memory_gib=64)
    run_tasks(make_job("/bob/run", cpu=2, memory_gib=1), worker)
    run_tasks(make_job("/carol/batch", band=Band.BATCH, replicas=3, cpu=2, memory_gib=1), worker)
    make_job("/bob/train", replicas=2, cpu=2, memory_gib=1)
    tick_to_rest()
    grant = request_uplift(bob, budget_limit=0, reason="deadline", duration_seconds=3600)

    preview = token_client(ada).post(f"/api/v1/uplifts/{grant.pk}:preview", {}, format="json").json()

    assert preview["preemptible"] == {"batch": 3}
    assert [(m["task"], m["band_before"], m["band_after"]) for m in preview["tasks"]] == [
        ("/bob/train/0", "batch", "interactive"),
        ("/bob/train/1", "batch", "interactive"),
    ]
    # And the next tick does preempt carol's BATCH work for them.
    approve_uplift(ada, grant.pk)
    run_tick(next_ms())
    assert Task.objects.filter(job__name="/bob/train", state="assigned").count() == 2


def test_the_answer_is_what_its_schema_serializer_renders(ada, bob):
    from scheduler.api.serializers import UpliftPreviewSerializer, uplift_preview_json
    from scheduler.budgets.preview import preview_grant

    generated_cluster(1)
    tick_to_rest()
    grant = request_uplift(bob, budget_limit=0, reason="deadline", duration_seconds=3600)
    answer = preview_grant(ada, grant.pk)
    assert answer.preview.tasks
    assert uplift_preview_json(answer) == UpliftPreviewSerializer(answer).data


def test_only_admins_preview_and_bad_ids_get_stable_errors(ada, bob, olivia):
    make_worker("w1")
    run_tick(clock.now_ms())
    grant = request_uplift(bob, budget_limit=5000, reason="x", duration_seconds=3600)
    url = f"/api/v1/uplifts/{grant.pk}:preview"
    assert token_client(bob).post(url, {}, format="json").status_code == 403
    assert token_client(olivia).post(url, {}, format="json").status_code == 403
    assert token_client(ada).post(url, {}, format="json").status_code == 200
    missing = token_client(ada).post("/api/v1/uplifts/999999:preview", {}, format="json")
    assert (missing.status_code, missing.json()["code"], missing.json()["details"]["field"]) == (
        404,
        "NOT_FOUND",
        "id",
    )
    extra = token_client(ada).post(url, {"limit": 3}, format="json")
    assert (extra.status_code, extra.json()["details"]["field"]) == (400, "limit")
    approve_uplift(ada, grant.pk)
    decided = token_client(ada).post(url, {}, format="json")
    assert (decided.status_code, decided.json()["code"]) == (409, "FAILED_PRECONDITION")


def test_preview_before_any_tick_says_so(ada, bob):
    grant = request_uplift(bob, budget_limit=5000, reason="x", duration_seconds=3600)
    response = token_client(ada).post(f"/api/v1/uplifts/{grant.pk}:preview", {}, format="json")
    assert (response.status_code, response.json()["code"]) == (409, "FAILED_PRECONDITION")
