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
    olivia.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_worker", "view_worker", "change_job", "view_job"])
    )
    return {"ada": ada, "olivia": olivia}


def action(client, model: str, name: str, pks: list[int]):
    return client.post(
        f"/admin/scheduler/{model}/", {"action": name, "_selected_action": [str(pk) for pk in pks]}, follow=True
    )


@pytest.mark.parametrize(
    "model",
    [
        "job",
        "task",
        "attempt",
        "worker",
        "userbudget",
        "upliftgrant",
        "auditentry",
        "preemptionevent",
        "tickrecord",
        "dispatchintent",
    ],
)
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
    response = clients["ada"].post(
        "/admin/scheduler/userbudget/add/", {"user_id": "alice", "budget_limit": "700", "max_band": "3"}, follow=True
    )
    assert response.status_code == 200
    row = UserBudget.objects.get(user_id="alice")
    assert (row.budget_limit, row.max_band) == (700, 3)
    entry = AuditEntry.objects.get(action="budget.set")
    assert entry.reason == "edited in the Django admin" and entry.actor_name == "ada"
    assert clients["ada"].get(f"/admin/scheduler/userbudget/{row.pk}/delete/").status_code == 403


# --- each role's view of /admin/, as seed_demo sets the roles up (staff flag + group, no superuser) ---


@pytest.fixture
def demo_roles(clients, ada, olivia):
    """ada (iris-admins) and olivia (iris-operators) as seed_demo makes them: staff, not superusers."""
    for user in (ada, olivia):
        user.is_staff = True
        user.save()
    return clients


def test_admin_role_sees_and_uses_the_admin_site_without_being_superuser(demo_roles, ada):
    assert not ada.is_superuser
    index = demo_roles["ada"].get("/admin/").content.decode()
    assert "have permission to view or edit anything" not in index
    for model in (
        "scheduler/job",
        "scheduler/worker",
        "scheduler/userbudget",
        "scheduler/upliftgrant",
        "scheduler/auditentry",
        "scheduler/dispatchintent",
        "auth/user",
    ):
        assert f'href="/admin/{model}/"' in index, model
    assert demo_roles["ada"].get("/admin/scheduler/userbudget/add/").status_code == 200


def test_operator_role_sees_the_raw_data_read_only(demo_roles):
    index = demo_roles["olivia"].get("/admin/").content.decode()
    assert 'href="/admin/scheduler/worker/"' in index and 'href="/admin/scheduler/tickrecord/"' in index
    assert 'href="/admin/auth/user/"' not in index  # who the users are is an admin's business
    assert demo_roles["olivia"].get("/admin/scheduler/userbudget/add/").status_code == 403


def test_admin_site_rows_are_not_editable_even_by_admins(demo_roles):
    """A job's or worker's form is read-only: edits go through the actions (the services)."""
    worker = make_worker("w1")
    page = demo_roles["ada"].get(f"/admin/scheduler/worker/{worker.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    demo_roles["ada"].post(f"/admin/scheduler/worker/{worker.pk}/change/", {"name": "renamed", "cpu_millicores": "1"})
    assert Worker.objects.get(pk=worker.pk).name == "w1"


@pytest.mark.parametrize("who", ["anonymous", "alice"])
def test_researchers_and_visitors_are_sent_to_sign_in(demo_roles, who):
    response = demo_roles[who].get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_seed_demo_gives_admin_and_operator_the_staff_flag_not_superuser(db, settings, tmp_path):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    call_command("seed_demo", stdout=open(tmp_path / "out", "w"))
    users = {u.username: u for u in get_user_model().objects.all()}
    assert users["admin"].is_staff and users["ops"].is_staff and not users["alice"].is_staff
    assert not any(u.is_superuser for u in users.values())


def test_the_admin_names_audit_entries_in_english(clients, staff):
    page = clients["ada"].get("/admin/").content.decode()
    assert "Audit entries" in page and "Audit entrys" not in page
