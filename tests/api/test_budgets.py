"""Budgets with live spend, uplift grants and their expiry, and the audit trail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.budgets import writes as budgets_writes
from scheduler.budgets.queries import budget_view
from scheduler.budgets.rules import live_spend
from scheduler.budgets.writes import approve_uplift, deny_uplift, expire_uplifts
from scheduler.core.bands import Band
from scheduler.jobs.cancel import cancel_job
from scheduler.jobs.submit import submit_job
from scheduler.models import AuditEntry, UpliftGrant, UserBudget
from tests.api.conftest import error_of
from tests.personas import make_worker, run_tasks, submit

LIST_QUERIES = 6


def rejected(response, status: int, code: str, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = error_of(response)
    assert body["code"] == code
    if field:
        assert body["details"]["field"] == field
    return body


# --- live spend -----------------------------------------------------------------------------------


def test_spend_counts_active_tasks_of_work_requested_above_batch(alice, bob, ada):
    worker = make_worker("w1", device=("gpu", "h100", 8))
    run_tasks(submit(alice, "cpu", replicas=3, cpu=4, memory="16Gi"), worker, 2)  # 2 x 36, one pending
    run_tasks(
        submit(alice, "gpu", device={"type": "gpu", "variant": "h100", "count": 8}, cpu=8, memory="64Gi"), worker
    )  # 8000 + 64 + 40
    run_tasks(submit(alice, "sweep", priority="batch", cpu=8), worker)  # BATCH: never counted
    run_tasks(submit(alice, "demoted", cpu=2, memory="2Gi"), worker, band=Band.BATCH)  # stamped BATCH: counted
    run_tasks(
        submit_job(ada, {"command": ["true"], "name": "eval", "parent": "/alice/cpu", "cpu": 1}), worker
    )  # bills alice
    done = submit(bob, "done", cpu=64)
    run_tasks(done, worker)
    cancel_job(bob, "/bob/done")  # finished: not counted
    assert live_spend() == {"alice": 72 + 8104 + 12 + 6}


def test_live_spend_is_one_query_whatever_the_number_of_tasks(alice, bob, django_assert_num_queries):
    worker = make_worker()
    for i in range(20):
        run_tasks(submit(alice if i % 2 else bob, f"j{i}", replicas=3, cpu=1), worker)  # 5 + 1 (1 GiB) each
    with django_assert_num_queries(1):
        spend = live_spend()
    assert spend == {"alice": 180, "bob": 180}


# --- reading budgets ------------------------------------------------------------------------------


def test_budgets_list_everyone_with_a_row_an_open_grant_or_spend(as_bob, alice, bob, ada):
    UserBudget.objects.create(user_id="carol", budget_limit=400, max_band=Band.BATCH)
    budgets_writes.request_uplift(bob, budget_limit=5000, reason="deadline", duration_seconds=3600)
    run_tasks(submit(alice, "train", cpu=4, memory="16Gi"), make_worker())
    rows = {b["user"]: b for b in as_bob.get("/api/v1/budgets/").json()}
    assert sorted(rows) == ["alice", "bob", "carol"]
    assert rows["carol"] | {"grants": []} == {
        "user": "carol",
        "has_row": True,
        "budget_limit": 400,
        "max_band": "batch",
        "effective_budget_limit": 400,
        "effective_max_band": "batch",
        "spend": 0,
        "effective_band": "interactive",
        "over_budget": False,
        "downgrade": None,
        "grants": [],
        "spend_tick": None,  # no tick yet: summed live
        "spend_at": None,
    }
    assert (rows["alice"]["has_row"], rows["alice"]["budget_limit"], rows["alice"]["spend"]) == (False, 1000, 36)
    assert [g["state"] for g in rows["bob"]["grants"]] == ["requested"]
    assert rows["bob"]["effective_budget_limit"] == 1000  # a request raises nothing


def test_over_budget_interactive_work_runs_as_batch(as_alice, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=50, max_band=Band.INTERACTIVE)
    run_tasks(submit(alice, "train", replicas=2, cpu=4, memory="16Gi"), make_worker())
    budget = as_alice.get("/api/v1/budgets/alice").json()
    assert (budget["spend"], budget["effective_budget_limit"], budget["over_budget"], budget["effective_band"]) == (
        72,
        50,
        True,
        "batch",
    )


def test_spend_equal_to_the_limit_is_not_over_budget(as_alice, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=72, max_band=Band.INTERACTIVE)
    run_tasks(submit(alice, "train", replicas=2, cpu=4, memory="16Gi"), make_worker())
    assert as_alice.get("/api/v1/budgets/alice").json()["effective_band"] == "interactive"


def test_a_zero_limit_is_unlimited(as_alice, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=0, max_band=Band.INTERACTIVE)
    run_tasks(submit(alice, "train", replicas=2, cpu=64), make_worker(cpu=256))
    assert as_alice.get("/api/v1/budgets/alice").json()["effective_band"] == "interactive"


def test_a_user_without_a_row_reads_the_defaults(as_bob, alice):
    budget = as_bob.get("/api/v1/budgets/alice").json()
    assert (budget["has_row"], budget["budget_limit"], budget["max_band"]) == (False, 1000, "interactive")


def test_an_unknown_user_is_not_found(as_bob):
    rejected(as_bob.get("/api/v1/budgets/nobody"), 404, "NOT_FOUND", "user")


@pytest.mark.parametrize("users", [2, 20])
def test_budgets_list_runs_a_fixed_number_of_queries(as_alice, alice, users, django_assert_max_num_queries):
    worker = make_worker(cpu=1000)
    for i in range(users):
        UserBudget.objects.create(user_id=f"u{i}", budget_limit=100, max_band=Band.INTERACTIVE)
        budgets_writes.request_uplift(alice, user=None, budget_limit=10 + i, reason="r", duration_seconds=3600)
        run_tasks(submit(alice, f"j{i}", replicas=2), worker)
    with django_assert_max_num_queries(LIST_QUERIES):
        assert as_alice.get("/api/v1/budgets/").status_code == 200


def test_me_shows_role_and_effective_budget(clients):
    me = clients["olivia"].get("/api/v1/me/").json()
    assert (me["username"], me["role"], me["budget"]["effective_band"]) == ("olivia", "operator", "interactive")
    assert clients["ada"].get("/api/v1/me/").json()["role"] == "admin"
    assert clients["alice"].get("/api/v1/me/").json()["role"] == "researcher"


# --- setting budgets ------------------------------------------------------------------------------


def test_admin_sets_a_budget_and_the_change_is_audited(as_ada, ada, alice):
    response = as_ada.put(
        "/api/v1/budgets/alice", {"budget_limit": 5000, "max_band": "batch", "reason": "new team"}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["budget_limit"], response.json()["max_band"]) == (5000, "batch")
    as_ada.put("/api/v1/budgets/alice", {"max_band": "interactive", "reason": "probation over"}, format="json")
    row = UserBudget.objects.get(user_id="alice")
    assert (row.budget_limit, row.max_band) == (5000, Band.INTERACTIVE)
    first, second = AuditEntry.objects.order_by("pk")
    assert (first.actor, first.actor_name, first.action, first.target) == (ada, "ada", "budget.set", "alice")
    assert (first.before, first.after, first.reason) == (None, {"budget_limit": 5000, "max_band": "batch"}, "new team")
    assert (second.before, second.after) == (
        {"budget_limit": 5000, "max_band": "batch"},
        {"budget_limit": 5000, "max_band": "interactive"},
    )
    assert first.created_at is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_band": "urgent", "reason": "r"}, "max_band"),
        ({"max_band": "inherit", "reason": "r"}, "max_band"),
        ({"budget_limit": -1, "reason": "r"}, "budget_limit"),
        ({"budget_limit": "lots", "reason": "r"}, "budget_limit"),
        ({"budget_limit": 10}, "reason"),
        ({"reason": "nothing to set"}, "budget_limit"),
        ({"budget_limit": 10, "reason": "r", "colour": "red"}, "colour"),
    ],
)
def test_setting_a_budget_validates_band_limit_and_reason(as_ada, body, field):
    rejected(as_ada.put("/api/v1/budgets/alice", body, format="json"), 400, "INVALID_ARGUMENT", field)
    assert not UserBudget.objects.exists()
    assert not AuditEntry.objects.exists()


# --- uplift grants --------------------------------------------------------------------------------


def request_uplift(client, **body):
    return client.post(
        "/api/v1/uplifts/", {"reason": "paper deadline", "duration_seconds": 3600, **body}, format="json"
    )


def test_requesting_an_uplift_is_audited(as_alice, alice):
    response = request_uplift(as_alice, max_band="interactive", budget_limit=20000)
    assert response.status_code == 201
    grant = response.json()
    assert (grant["user"], grant["state"], grant["max_band"], grant["budget_limit"], grant["requested_by"]) == (
        "alice",
        "requested",
        "interactive",
        20000,
        "alice",
    )
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.target, entry.before) == (
        alice,
        "uplift.request",
        f"uplift {grant['id']} for alice",
        None,
    )
    assert entry.after["state"] == "requested"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "max_band"),
        ({"max_band": "urgent"}, "max_band"),
        ({"budget_limit": -5}, "budget_limit"),
        ({"budget_limit": 10, "reason": ""}, "reason"),
        ({"budget_limit": 10, "duration_seconds": 10**9}, "duration_seconds"),
        ({"budget_limit": 10, "duration_seconds": None}, "duration_seconds"),
    ],
)
def test_uplift_requests_are_validated(as_alice, body, field):
    rejected(request_uplift(as_alice, **body), 400, "INVALID_ARGUMENT", field)
    assert not UpliftGrant.objects.exists()


@pytest.mark.parametrize("band", ["production", "system"])
def test_an_uplift_to_an_admin_band_is_refused_as_nobody_could_use_it(as_alice, as_ada, band):
    for client in (as_alice, as_ada):
        response = rejected(
            request_uplift(client, user="alice", max_band=band, budget_limit=10), 400, "INVALID_ARGUMENT", "max_band"
        )
        assert f"no uplift grants {band.upper()}" in response["message"]
    assert not UpliftGrant.objects.exists()


@pytest.mark.parametrize("band", [Band.PRODUCTION, Band.SYSTEM])
def test_an_admin_band_uplift_requested_before_the_rule_cannot_be_approved(as_ada, alice, band):
    grant = UpliftGrant.objects.create(
        user_id="alice", requested_by=alice, max_band=int(band), reason="old", duration_seconds=3600
    )

    rejected(as_ada.post(f"/api/v1/uplifts/{grant.pk}:approve", {}, format="json"), 409, "FAILED_PRECONDITION", "id")

    grant.refresh_from_db()
    assert grant.state == "requested"
    assert as_ada.get("/api/v1/budgets/alice").json()["effective_max_band"] != band.wire


def test_researchers_request_uplifts_only_for_themselves(as_alice):
    rejected(request_uplift(as_alice, user="bob", budget_limit=10), 403, "PERMISSION_DENIED", "user")


def test_admins_request_uplifts_for_anyone(as_ada):
    assert request_uplift(as_ada, user="bob", budget_limit=10).json()["user"] == "bob"


def test_approval_starts_the_grant_now_and_is_audited(as_ada, alice, ada):
    grant = budgets_writes.request_uplift(alice, budget_limit=20000, reason="deadline", duration_seconds=3600)
    before = timezone.now()
    response = as_ada.post(
        f"/api/v1/uplifts/{grant.pk}:approve", {"duration_seconds": 7200, "note": "go"}, format="json"
    )
    assert response.status_code == 200
    grant.refresh_from_db()
    assert grant.state == "approved"
    assert before <= grant.starts_at <= timezone.now()
    assert grant.expires_at - grant.starts_at == timedelta(seconds=7200)
    assert (grant.decided_by, grant.decision_note) == (ada, "go")
    entry = AuditEntry.objects.filter(action="uplift.approve").get()
    assert (entry.actor_name, entry.before["state"], entry.after["state"], entry.reason) == (
        "ada",
        "requested",
        "approved",
        "go",
    )
    assert entry.after["expires_at"] == grant.expires_at.isoformat()


def test_approval_without_a_duration_uses_the_requested_one(as_ada, alice):
    grant = budgets_writes.request_uplift(alice, budget_limit=20000, reason="deadline", duration_seconds=600)
    as_ada.post(f"/api/v1/uplifts/{grant.pk}:approve", {}, format="json")
    grant.refresh_from_db()
    assert grant.expires_at - grant.starts_at == timedelta(seconds=600)


def test_denial_is_audited_and_raises_nothing(as_ada, alice):
    grant = budgets_writes.request_uplift(alice, budget_limit=20000, reason="deadline", duration_seconds=600)
    response = as_ada.post(f"/api/v1/uplifts/{grant.pk}:deny", {"note": "not this quarter"}, format="json")
    assert (response.json()["state"], response.json()["decision_note"]) == ("denied", "not this quarter")
    assert AuditEntry.objects.filter(action="uplift.deny", reason="not this quarter").exists()
    assert budget_view("alice").effective_budget_limit == 1000


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_deciding_a_decided_grant_is_failed_precondition(as_ada, alice, ada, verb):
    grant = budgets_writes.request_uplift(alice, budget_limit=20000, reason="deadline", duration_seconds=600)
    deny_uplift(ada, grant.pk, note="no")
    rejected(as_ada.post(f"/api/v1/uplifts/{grant.pk}:{verb}", {}, format="json"), 409, "FAILED_PRECONDITION")
    assert AuditEntry.objects.filter(action__in=["uplift.approve", "uplift.deny"]).count() == 1


def test_deciding_a_missing_grant_is_not_found(as_ada):
    rejected(as_ada.post("/api/v1/uplifts/999:approve", {}, format="json"), 404, "NOT_FOUND")


def test_approving_an_uplift_restores_interactive_for_an_over_budget_user(as_alice, alice, ada):
    run_tasks(
        submit(alice, "train", replicas=2, device={"type": "gpu", "variant": "h100", "count": 1}),
        make_worker(device=("gpu", "h100", 8)),
    )  # 2 x 1001 > 1000
    assert as_alice.get("/api/v1/budgets/alice").json()["effective_band"] == "batch"
    grant = budgets_writes.request_uplift(alice, budget_limit=5000, reason="deadline", duration_seconds=3600)
    approve_uplift(ada, grant.pk)
    budget = as_alice.get("/api/v1/budgets/alice").json()
    assert (budget["budget_limit"], budget["effective_budget_limit"], budget["effective_band"]) == (
        1000,
        5000,
        "interactive",
    )
    assert [g["state"] for g in budget["grants"]] == ["approved"]
    explained = as_alice.get("/api/v1/jobs/alice/train:explain").json()
    assert explained["limit"] == 5000


def test_grants_take_the_best_of_row_and_every_active_grant(alice, ada):
    UserBudget.objects.create(user_id="alice", budget_limit=3000, max_band=Band.BATCH)
    for body in ({"budget_limit": 2000}, {"budget_limit": 8000}, {"max_band": "interactive"}):
        approve_uplift(ada, budgets_writes.request_uplift(alice, reason="r", duration_seconds=600, **body).pk)
    view = budget_view("alice")
    assert (view.effective_budget_limit, view.effective_max_band) == (8000, Band.INTERACTIVE)
    approve_uplift(ada, budgets_writes.request_uplift(alice, reason="r", duration_seconds=600, budget_limit=0).pk)
    assert budget_view("alice").effective_budget_limit == 0  # unlimited beats any number


def test_grant_expiry_marks_it_expired_and_the_budget_falls_back(as_alice, alice, ada):
    UserBudget.objects.create(user_id="alice", budget_limit=1000, max_band=Band.BATCH)
    grant = budgets_writes.request_uplift(
        alice, max_band="interactive", budget_limit=9000, reason="r", duration_seconds=600
    )
    approve_uplift(ada, grant.pk)
    assert expire_uplifts() == 0  # not due yet
    assert as_alice.post("/api/v1/jobs/", {"name": "during", "command": ["true"]}, format="json").status_code == 201

    grant.refresh_from_db()
    assert expire_uplifts(grant.expires_at + timedelta(seconds=1)) == 1
    grant.refresh_from_db()
    assert grant.state == "expired"
    entry = AuditEntry.objects.get(action="uplift.expire")
    assert (entry.before["state"], entry.after["state"]) == ("approved", "expired")
    budget = as_alice.get("/api/v1/budgets/alice").json()
    assert (budget["effective_budget_limit"], budget["effective_max_band"], budget["grants"]) == (1000, "batch", [])
    response = as_alice.post("/api/v1/jobs/", {"name": "after", "command": ["true"]}, format="json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "PERMISSION_DENIED"


def test_an_approved_grant_past_its_expiry_stops_counting_before_it_is_marked(as_alice, alice, ada):
    grant = budgets_writes.request_uplift(alice, budget_limit=9000, reason="r", duration_seconds=600)
    approve_uplift(ada, grant.pk)
    UpliftGrant.objects.filter(pk=grant.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert as_alice.get("/api/v1/budgets/alice").json()["effective_budget_limit"] == 1000


# --- listing grants and the audit log -------------------------------------------------------------


@pytest.fixture
def grants(alice, bob, ada):
    a = budgets_writes.request_uplift(alice, budget_limit=1, reason="a", duration_seconds=600)
    b = budgets_writes.request_uplift(bob, budget_limit=2, reason="b", duration_seconds=600)
    approve_uplift(ada, b.pk)
    return a, b


def test_researchers_see_their_own_grants(as_alice, grants):
    assert [g["user"] for g in as_alice.get("/api/v1/uplifts/").json()["results"]] == ["alice"]
    rejected(as_alice.get("/api/v1/uplifts/?user=bob"), 403, "PERMISSION_DENIED", "user")


@pytest.mark.parametrize("persona", ["olivia", "ada"])
def test_operators_and_admins_see_every_grant_and_filter(clients, grants, persona):
    client = clients[persona]
    assert [g["user"] for g in client.get("/api/v1/uplifts/").json()["results"]] == ["bob", "alice"]
    assert [g["user"] for g in client.get("/api/v1/uplifts/?state=approved").json()["results"]] == ["bob"]
    assert [g["user"] for g in client.get("/api/v1/uplifts/?user=alice").json()["results"]] == ["alice"]


def test_uplifts_list_runs_a_fixed_number_of_queries(as_ada, alice, ada, django_assert_max_num_queries):
    for i in range(15):
        approve_uplift(ada, budgets_writes.request_uplift(alice, budget_limit=i, reason="r", duration_seconds=600).pk)
    with django_assert_max_num_queries(LIST_QUERIES + 1):  # + the admin's groups
        assert len(as_ada.get("/api/v1/uplifts/").json()["results"]) == 15


def test_audit_lists_every_budget_and_grant_change_newest_first(as_ada, grants):
    as_ada.put("/api/v1/budgets/carol", {"budget_limit": 10, "reason": "r", "create_user_budget": True}, format="json")
    page = as_ada.get("/api/v1/audit/").json()
    assert [e["action"] for e in page["results"]] == [
        "budget.set",
        "uplift.approve",
        "uplift.request",
        "uplift.request",
    ]
    assert page["results"][0] | {"id": 0, "created_at": ""} == {
        "id": 0,
        "actor": "ada",
        "action": "budget.set",
        "target": "carol",
        "before": None,
        "after": {"budget_limit": 10, "max_band": "interactive"},
        "reason": "r",
        "created_at": "",
    }
