"""The Django admin stays useful for raw data, and its actions call the same services."""

from __future__ import annotations

import pytest

from scheduler.models import AuditEntry, Job, UpliftGrant, UserBudget, Worker
from tests.personas import make_worker, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(ada, olivia):
    """ada is a superuser; olivia a staff operator allowed to change workers and jobs."""
    from django.contrib.auth.models import Permission

    for user in (ada, olivia):
        user.is_staff = True
        user.is_superuser = user is ada
        user.save()
    olivia.user_permissions.add(*Permission.objects.filter(codename__in=["change_worker", "view_worker", "change_job",
                                                                         "view_job"]))
    return {"ada": ada, "olivia": olivia}


def action(client, model: str, name: str, pks: list[int]):
    return client.post(f"/admin/scheduler/{model}/", {"action": name, "_selected_action": [str(pk) for pk in pks]},
                       follow=True)


@pytest.mark.parametrize("model", ["job", "task", "attempt", "worker", "userbudget", "upliftgrant", "auditentry",
                                   "preemptionevent", "tickrecord", "dispatchintent"])
def test_every_model_lists(clients, staff, model):
    assert clients["ada"].get(f"/admin/scheduler/{model}/").status_code == 200


def test_approve_and_deny_actions_use_the_service(clients, staff, alice):
    a = UpliftGrant.objects.create(user_id="alice", requested_by=alice, budget_limit=5, reason="x", duration_seconds=60)
    b = UpliftGrant.objects.create(user_id="alice", requested_by=alice, budget_limit=6, reason="y", duration_seconds=60)
    action(clients["ada"], "upliftgrant", "approve", [a.pk])
    response = action(clients["ada"], "upliftgrant", "deny", [a.pk, b.pk])
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.state == "approved" and a.expires_at is not None and b.state == "denied"
    assert f"uplift {a.pk} was already decided (approved)" in response.content.decode()
    assert AuditEntry.objects.filter(action="uplift.approve", actor_name="ada").exists()


def test_drain_and_cancel_actions_use_the_services(clients, staff, alice):
    worker = make_worker("w1")
    job = submit(alice, "train")
    action(clients["olivia"], "worker", "drain_workers", [worker.pk])
    assert Worker.objects.get(pk=worker.pk).draining
    refused = action(clients["olivia"], "job", "cancel_jobs", [job.pk])
    assert "only its owner or an admin may cancel it" in refused.content.decode()
    action(clients["ada"], "job", "cancel_jobs", [job.pk])
    assert Job.objects.get(pk=job.pk).state == "killed"


def test_budget_saved_in_the_admin_is_validated_and_audited(clients, staff):
    response = clients["ada"].post("/admin/scheduler/userbudget/add/",
                                   {"user_id": "alice", "budget_limit": "700", "max_band": "3"}, follow=True)
    assert response.status_code == 200
    row = UserBudget.objects.get(user_id="alice")
    assert (row.budget_limit, row.max_band) == (700, 3)
    entry = AuditEntry.objects.get(action="budget.set")
    assert entry.reason == "edited in the Django admin" and entry.actor_name == "ada"
    assert clients["ada"].get(f"/admin/scheduler/userbudget/{row.pk}/delete/").status_code == 403
