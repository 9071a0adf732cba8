"""Console forms validate, call the services (the same rules as the API and the CLI), and show
the service's refusal on the field it names. Every action works as a plain form post."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import AuditEntry, Job, TickRecord, UpliftGrant, UserBudget, Worker
from scheduler.tick.run import run_tick
from tests.personas import make_job, make_worker, submit

pytestmark = pytest.mark.django_db

JOB = {
    "name": "train",
    "priority": "",
    "replicas": "2",
    "cpu": "1",
    "memory": "2Gi",
    "device_type": "cpu",
    "command": "python train.py --lr 0.1",
}


def errors_of(response) -> dict:
    form = response.context["form"]
    return {name: " ".join(errs) for name, errs in form.errors.items()}


# --- submit ---------------------------------------------------------------------------------------


def test_submitting_creates_the_job_through_the_service_and_opens_it(clients):
    response = clients["alice"].post("/jobs/new/", JOB)
    assert response.status_code == 302 and response["Location"] == "/jobs/alice/train/"
    job = Job.objects.get(name="/alice/train")
    assert (job.user, job.band, job.replicas, job.memory_bytes) == ("alice", 2, 2, 2 << 30)
    assert job.command == ["python", "train.py", "--lr", "0.1"]
    assert job.submission_argv == []  # no fabricated command line: the console sent none
    assert job.request["command"] == ["python", "train.py", "--lr", "0.1"] and job.request["replicas"] == 2
    page = clients["alice"].get(response["Location"]).content.decode()
    assert "Submitted /alice/train as INTERACTIVE with 2 task(s)." in page
    assert "Submitted as" not in page and "&quot;train.py&quot;" in page  # the request is shown


def test_a_band_only_admins_may_use_is_refused_on_the_priority_field(clients):
    response = clients["alice"].post("/jobs/new/", {**JOB, "priority": "production"})
    assert response.status_code == 400
    assert "only admins may submit PRODUCTION jobs" in errors_of(response)["priority"]
    # In the form's words: the form has a Priority menu, not a --priority flag.
    assert "--priority" not in errors_of(response)["priority"]
    assert "choose INTERACTIVE or BATCH" in errors_of(response)["priority"]
    assert not Job.objects.exists()


def test_above_max_band_is_refused_with_the_identity_the_server_saw(clients):
    UserBudget.objects.create(user_id="alice", budget_limit=0, max_band=3)
    response = clients["alice"].post("/jobs/new/", JOB)
    assert response.status_code == 400
    message = errors_of(response)["priority"]
    assert "Budget identity 'alice' cannot submit INTERACTIVE jobs (max band: BATCH)" in message
    assert "request an uplift" in message


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"memory": "lots"}, "memory", "cannot read 'lots' as a size"),
        ({"replicas": "0"}, "replicas", "greater than or equal to 1"),
        ({"device_type": "gpu", "device_count": "8"}, "device_variant", "required"),
        ({"device_type": "gpu", "device_variant": "h100"}, "device_count", "required"),
        ({"name": "bad name"}, "name", "is not a valid name"),
        ({"priority": "system"}, "priority", "only admins"),
        ({"command": "python 'unterminated"}, "command", "cannot split the command"),
    ],
)
def test_invalid_submissions_name_the_field(clients, change, field, words):
    response = clients["alice"].post("/jobs/new/", {**JOB, **change})
    assert response.status_code == 400
    assert words in errors_of(response).get(field, ""), errors_of(response)
    assert not Job.objects.exists()


def test_admin_system_job_needs_the_reason_naming_the_work(clients):
    response = clients["ada"].post("/jobs/new/", {**JOB, "priority": "system", "system_reason": "superhero"})
    assert "hero, finelog or iris" in errors_of(response)["system_reason"]
    ok = clients["ada"].post("/jobs/new/", {**JOB, "priority": "system", "system_reason": "hero run; commit=abc"})
    assert ok.status_code == 302
    assert Job.objects.get(name="/ada/train").system_reason == "hero run; commit=abc"


# --- what-if --------------------------------------------------------------------------------------


def test_what_if_answers_without_submitting(clients):
    make_worker("w1")
    response = clients["alice"].get("/what-if/", {**JOB, "name": "probe"})
    answer = response.context["answer"]
    assert answer.accepted and answer.job == "/alice/probe" and answer.would_place
    html = response.content.decode()
    assert "Accepted as /alice/probe" in html and "Would be placed" in html and "w1" in html
    assert not Job.objects.exists()


def test_what_if_reports_a_rejection_as_an_answer(clients):
    response = clients["alice"].get("/what-if/", {**JOB, "priority": "production"})
    html = response.content.decode()
    assert "Would be rejected" in html and "PERMISSION_DENIED" in html and "only admins" in html


def test_what_if_for_another_user_is_for_operators(clients, bob):
    refused = clients["alice"].get("/what-if/", {**JOB, "user": "bob"})
    assert "only admins and operators" in " ".join(
        refused.context["form"].non_field_errors() + [errors_of(refused).get("user", "")]
    )
    answered = clients["olivia"].get("/what-if/", {**JOB, "user": "bob"})
    assert answered.context["answer"].job == "/bob/train"


def test_what_if_shows_the_downgrade_with_numbers(clients, alice):
    from tests.personas import run_tasks

    worker = make_worker("w1", cpu=2, memory_gib=8)
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=2)
    run_tasks(submit(alice, "warm", cpu=2, memory="8Gi"), worker)
    html = clients["alice"].get("/what-if/", {**JOB, "name": "probe"}).content.decode()
    assert "downgraded: 8 pts over (18 &gt; 10)" in html


# --- cancel ---------------------------------------------------------------------------------------


def test_owner_cancels_a_job(clients, alice):
    submit(alice, "train")
    response = clients["alice"].post("/jobs/alice/train:cancel")
    assert response.status_code == 302 and response["Location"] == "/jobs/alice/train/"
    assert Job.objects.get(name="/alice/train").state == "killed"


def test_another_researcher_cannot_cancel_and_is_told_why(clients, alice):
    submit(alice, "train")
    response = clients["bob"].post("/jobs/alice/train:cancel", follow=True)
    assert "belongs to &#x27;alice&#x27;; only its owner or an admin may cancel it" in response.content.decode()
    assert Job.objects.get(name="/alice/train").state == "pending"
    assert "Cancel job" not in clients["bob"].get("/jobs/alice/train/").content.decode()


def test_cancelling_twice_says_it_has_finished(clients, alice):
    submit(alice, "train")
    clients["alice"].post("/jobs/alice/train:cancel")
    again = clients["alice"].post("/jobs/alice/train:cancel", follow=True)
    assert "has already finished (killed)" in again.content.decode()


# --- uplifts --------------------------------------------------------------------------------------


def test_researcher_requests_an_uplift_and_sees_its_state(clients):
    response = clients["alice"].post(
        "/budgets/alice:request-uplift",
        {"budget_limit": "5000", "max_band": "", "duration_hours": "48", "reason": "deadline"},
    )
    assert response.status_code == 302
    grant = UpliftGrant.objects.get()
    assert (grant.user_id, grant.budget_limit, grant.duration_seconds, grant.state) == (
        "alice",
        5000,
        48 * 3600,
        "requested",
    )
    assert AuditEntry.objects.filter(action="uplift.request").exists()
    page = clients["alice"].get("/budgets/alice/").content.decode()
    assert "requested" in page and "deadline" in page


def test_uplift_request_needs_something_to_raise(clients):
    response = clients["alice"].post("/budgets/alice:request-uplift", {"duration_hours": "1", "reason": "x"})
    assert response.status_code == 400
    assert "ask for max_band, budget_limit or both" in " ".join(response.context["form"].errors.get("max_band", []))
    assert not UpliftGrant.objects.exists()


def test_researcher_may_not_request_for_someone_else(clients, bob):
    response = clients["alice"].post(
        "/budgets/bob:request-uplift", {"budget_limit": "1", "duration_hours": "1", "reason": "x"}
    )
    assert response.status_code == 400
    assert "only for yourself" in " ".join(response.context["form"].non_field_errors())
    assert "Request an uplift" not in clients["alice"].get("/budgets/bob/").content.decode()


def test_researchers_see_only_their_own_requests(clients, bob):
    UpliftGrant.objects.create(
        user_id="bob", requested_by=bob, budget_limit=5, reason="secret plan", duration_seconds=60
    )
    assert "secret plan" not in clients["alice"].get("/budgets/bob/").content.decode()
    assert "secret plan" in clients["bob"].get("/budgets/bob/").content.decode()
    assert "secret plan" in clients["olivia"].get("/budgets/bob/").content.decode()


def test_admin_approves_with_an_expiry_and_the_effective_budget_changes(clients, alice):
    grant = UpliftGrant.objects.create(
        user_id="alice", requested_by=alice, budget_limit=5000, reason="deadline", duration_seconds=3600
    )
    page = clients["ada"].get("/manage/uplifts/").content.decode()
    assert "alice" in page and "deadline" in page and 'value="1"' in page  # the requested hours, prefilled
    response = clients["ada"].post(
        f"/manage/uplifts/{grant.pk}:approve", {f"g{grant.pk}-duration_hours": "48", f"g{grant.pk}-note": "ok"}
    )
    assert response.status_code == 302
    grant.refresh_from_db()
    assert grant.state == "approved" and grant.decision_note == "ok"
    assert abs(grant.expires_at - (timezone.now() + timedelta(hours=48))) < timedelta(minutes=1)
    assert "limit 5,000" in clients["alice"].get("/budgets/").content.decode().replace("5,000 /", "limit 5,000")
    again = clients["ada"].post(f"/manage/uplifts/{grant.pk}:deny", {}, follow=True)
    assert "already decided (approved)" in again.content.decode()


def test_admin_denies_with_a_note(clients, alice):
    grant = UpliftGrant.objects.create(user_id="alice", requested_by=alice, max_band=1, reason="x", duration_seconds=60)
    clients["ada"].post(f"/manage/uplifts/{grant.pk}:deny", {f"g{grant.pk}-note": "not this quarter"})
    grant.refresh_from_db()
    assert grant.state == "denied" and grant.decision_note == "not this quarter"
    assert "not this quarter" in clients["alice"].get("/budgets/alice/").content.decode()


def test_approval_with_an_impossible_expiry_is_refused_on_the_field(clients, alice):
    grant = UpliftGrant.objects.create(
        user_id="alice", requested_by=alice, budget_limit=5, reason="x", duration_seconds=60
    )
    response = clients["ada"].post(f"/manage/uplifts/{grant.pk}:approve", {f"g{grant.pk}-duration_hours": "100000"})
    assert response.status_code == 400
    assert "must be at most" in response.content.decode()
    grant.refresh_from_db()
    assert grant.state == "requested"


# --- budgets (admin console) ----------------------------------------------------------------------


def test_admin_sets_a_budget_and_it_is_audited(clients):
    response = clients["ada"].post(
        "/manage/", {"user": "alice", "budget_limit": "2500", "max_band": "batch", "reason": "new tier"}
    )
    assert response.status_code == 302
    row = UserBudget.objects.get(user_id="alice")
    assert (row.budget_limit, row.max_band) == (2500, 3)
    entry = AuditEntry.objects.get(action="budget.set")
    assert (entry.actor_name, entry.target, entry.reason) == ("ada", "alice", "new tier")
    assert "new tier" in clients["ada"].get("/manage/audit/").content.decode()


def test_budget_form_prefills_the_current_values(clients):
    UserBudget.objects.create(user_id="alice", budget_limit=777, max_band=3)
    html = clients["ada"].get("/manage/?user=alice").content.decode()
    assert 'value="777"' in html and '<option value="batch" selected>' in html


@pytest.mark.parametrize(
    "data, field, words",
    [
        ({"user": "alice", "reason": "x"}, "budget_limit", "give budget_limit, max_band or both"),
        ({"user": "alice", "budget_limit": str(2**63), "reason": "x"}, "budget_limit", "must be at most"),
        ({"user": "no one", "budget_limit": "5", "reason": "x"}, "user", "is not a valid name"),
        ({"user": "alice", "budget_limit": "5"}, "reason", "required"),
        ({"user": "alice", "budget_limit": "-1", "reason": "x"}, "budget_limit", "greater than or equal to 0"),
    ],
)
def test_invalid_budgets_are_refused_on_the_field(clients, data, field, words):
    response = clients["ada"].post("/manage/", data)
    assert response.status_code == 400
    assert words in errors_of(response).get(field, ""), errors_of(response)
    assert not UserBudget.objects.exists()


# --- operators ------------------------------------------------------------------------------------


def test_operator_drains_a_worker(clients):
    make_worker("w1")
    response = clients["olivia"].post("/workers/w1:drain", follow=True)
    assert "w1 is draining" in response.content.decode()
    assert Worker.objects.get(name="w1").draining


def test_draining_an_unknown_worker_says_so(clients):
    response = clients["olivia"].post("/workers/ghost:drain", follow=True)
    assert "worker ghost is not registered" in response.content.decode()


def test_operator_runs_a_tick(clients, alice):
    make_worker("w1")
    submit(alice, "train")
    response = clients["olivia"].post("/scheduler/tick", follow=True)
    tick = TickRecord.objects.get()
    assert f"Tick {tick.pk} ran in" in response.content.decode()
    assert "1 assigned" in response.content.decode()


def test_the_web_process_keeps_no_decision_after_an_operators_tick(clients, caplog):
    """A tick process keeps its decision for the next tick; the web process does not (an
    operator's tick there leaves no copy of the cluster): its next tick decides afresh, even
    over a cluster that did not change."""
    make_worker("w1", cpu=2, memory_gib=4)
    make_job("/alice/big", cpu=8)  # never fits: the cluster stays as it is
    clients["olivia"].post("/scheduler/tick")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="scheduler.tick.run"):
        run_tick()
    ran = [r for r in caplog.records if getattr(r, "outcome", None) == "ran"]
    assert [r.decision_reused for r in ran] == [False]
