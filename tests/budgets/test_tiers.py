"""Cluster-config tiers reconciled into budget rows, the start-up check, and grant expiry."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.utils import timezone

from scheduler.budgets.tiers import reconcile_budget_tiers
from scheduler.budgets.writes import expire_uplifts
from scheduler.checks import INVALID_CLUSTER_CONFIG, check_cluster_config, refuse_invalid_cluster_config
from scheduler.foundation.cluster_config import ClusterConfigError, parse_cluster_config
from scheduler.core.bands import Band
from scheduler.models import AuditEntry, UpliftGrant, UserBudget

pytestmark = pytest.mark.django_db

TIERS = {
    "budget_defaults": {"budget_limit": 1000, "max_band": "interactive"},
    "user_budgets": [
        {"user_ids": ["alice", "bob"], "budget_limit": 5000, "max_band": "interactive"},
        {"user_ids": ["bob", "ci-bot"], "budget_limit": 0, "max_band": "batch"},
    ],
}

VALID_TOML = """
[budget_defaults]
budget_limit = 1000
max_band = "interactive"

[[user_budgets]]
user_ids = ["alice", "bob"]
budget_limit = 5000
max_band = "interactive"

[[user_budgets]]
user_ids = ["bob", "ci-bot"]
budget_limit = 0
max_band = "batch"
"""

INVALID_TIER_TOML = """
[[user_budgets]]
user_ids = ["alice"]
budget_limit = 5000
max_band = "interactive"

[[user_budgets]]
user_ids = ["bob"]
budget_limit = 10
max_band = "urgent"
"""


def budgets() -> dict[str, tuple[int, str]]:
    return {row.user_id: (row.budget_limit, Band(row.max_band).wire) for row in UserBudget.objects.all()}


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- reconciliation --------------------------------------------------------------------------------


def test_reconcile_upserts_each_listed_user_and_later_tiers_win():
    changed = reconcile_budget_tiers(parse_cluster_config(TIERS))

    assert changed == 3
    assert budgets() == {"alice": (5000, "interactive"), "bob": (0, "batch"), "ci-bot": (0, "batch")}


def test_reconcile_gives_unlisted_users_no_row_and_leaves_their_rows_alone():
    UserBudget.objects.create(user_id="charlie", budget_limit=7, max_band=Band.BATCH)

    reconcile_budget_tiers(parse_cluster_config(TIERS))

    assert budgets()["charlie"] == (7, "batch")
    assert not UserBudget.objects.filter(user_id="dave").exists()


def test_reconcile_twice_changes_nothing_the_second_time():
    config = parse_cluster_config(TIERS)
    reconcile_budget_tiers(config)
    entries = AuditEntry.objects.count()

    assert reconcile_budget_tiers(config) == 0
    assert AuditEntry.objects.count() == entries


def test_reconcile_audits_each_changed_row_with_before_and_after():
    UserBudget.objects.create(user_id="alice", budget_limit=5000, max_band=Band.INTERACTIVE)  # already right
    UserBudget.objects.create(user_id="bob", budget_limit=100, max_band=Band.INTERACTIVE)

    changed = reconcile_budget_tiers(parse_cluster_config(TIERS, source="cluster.toml"))

    assert changed == 2
    entries = {e.target: e for e in AuditEntry.objects.all()}
    assert set(entries) == {"bob", "ci-bot"}
    bob = entries["bob"]
    assert bob.actor_name == "cluster-config"
    assert bob.actor is None
    assert bob.before == {"budget_limit": 100, "max_band": "interactive"}
    assert bob.after == {"budget_limit": 0, "max_band": "batch"}
    assert bob.reason == "user_budgets[1] of cluster.toml"
    assert entries["ci-bot"].before is None


def test_reconcile_stamps_updated_rows():
    UserBudget.objects.create(user_id="bob", budget_limit=100, max_band=Band.INTERACTIVE)
    yesterday = timezone.now() - timedelta(days=1)
    UserBudget.objects.filter(pk="bob").update(updated_at=yesterday)

    reconcile_budget_tiers(parse_cluster_config(TIERS))

    assert UserBudget.objects.get(pk="bob").updated_at > yesterday + timedelta(hours=1)


def test_config_without_tiers_changes_nothing():
    assert reconcile_budget_tiers(parse_cluster_config({})) == 0
    assert not UserBudget.objects.exists()


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        (
            {"user_ids": ["bob"], "budget_limit": 1, "max_band": "urgent"},
            "user_budgets[1].max_band: unknown band 'urgent'",
        ),
        (
            {"user_ids": ["bob", " "], "budget_limit": 1, "max_band": "batch"},
            "user_budgets[1].user_ids[1]: empty user id",
        ),
        ({"user_ids": [], "budget_limit": 1, "max_band": "batch"}, "user_budgets[1].user_ids"),
        ({"user_ids": ["bob"], "budget_limit": -5, "max_band": "batch"}, "user_budgets[1].budget_limit"),
        ({"user_ids": ["bob"], "max_band": "batch"}, "user_budgets[1].budget_limit: missing"),
    ],
)
def test_an_invalid_tier_is_named_with_its_field(tier, message):
    good = {"user_ids": ["alice"], "budget_limit": 1, "max_band": "interactive"}

    with pytest.raises(ClusterConfigError) as excinfo:
        parse_cluster_config({"user_budgets": [good, tier]})

    assert message in str(excinfo.value)


# --- the management command ------------------------------------------------------------------------


def test_command_reconciles_and_reports_rows_changed(tmp_path):
    path = write(tmp_path, "cluster.toml", VALID_TOML)
    out = StringIO()

    call_command("reconcile_budgets", config=path, stdout=out)
    call_command("reconcile_budgets", config=path, stdout=out)

    first, second = out.getvalue().splitlines()
    assert first.endswith("3 row(s) changed.")
    assert second.endswith("0 row(s) changed.")
    assert budgets()["bob"] == (0, "batch")


def test_command_reads_iris_cluster_config_yaml(tmp_path, settings):
    settings.CLUSTER_CONFIG = write(
        tmp_path, "cluster.yaml", "user_budgets:\n  - user_ids: [alice]\n    budget_limit: 9\n    max_band: batch\n"
    )

    call_command("reconcile_budgets", stdout=StringIO())

    assert budgets() == {"alice": (9, "batch")}


def test_command_without_config_is_a_no_op(settings):
    settings.CLUSTER_CONFIG = ""
    out = StringIO()

    call_command("reconcile_budgets", stdout=out)

    assert "nothing to reconcile" in out.getvalue()
    assert not UserBudget.objects.exists()


def test_command_rejects_an_invalid_tier_naming_tier_and_field_and_writes_nothing(tmp_path):
    path = write(tmp_path, "cluster.toml", INVALID_TIER_TOML)

    with pytest.raises(CommandError) as excinfo:
        call_command("reconcile_budgets", config=path, stdout=StringIO())

    assert "user_budgets[1].max_band: unknown band 'urgent'" in str(excinfo.value)
    assert path in str(excinfo.value)
    assert not UserBudget.objects.exists()


def test_example_config_is_valid_and_reconciles():
    out = StringIO()
    call_command("reconcile_budgets", config=str(settings.BASE_DIR / "config" / "cluster.example.toml"), stdout=out)

    assert "row(s) changed" in out.getvalue()
    assert budgets()["bob"][1] == "batch"


# --- the start-up check ----------------------------------------------------------------------------


def test_check_passes_without_a_config(settings):
    settings.CLUSTER_CONFIG = ""
    assert check_cluster_config() == []


def test_check_passes_a_valid_config(tmp_path, settings):
    settings.CLUSTER_CONFIG = write(tmp_path, "cluster.toml", VALID_TOML)
    assert check_cluster_config() == []


def test_check_fails_an_invalid_tier_naming_tier_and_field(tmp_path, settings):
    settings.CLUSTER_CONFIG = write(tmp_path, "cluster.toml", INVALID_TIER_TOML)

    [error] = check_cluster_config()

    assert error.id == INVALID_CLUSTER_CONFIG
    assert "user_budgets[1].max_band: unknown band 'urgent'" in error.msg


def test_check_fails_a_missing_file(tmp_path, settings):
    settings.CLUSTER_CONFIG = str(tmp_path / "nope.toml")

    [error] = check_cluster_config()

    assert "cannot read cluster config" in error.msg


def test_management_commands_refuse_to_start_on_an_invalid_tier(tmp_path, settings):
    settings.CLUSTER_CONFIG = write(tmp_path, "cluster.toml", INVALID_TIER_TOML)

    with pytest.raises(SystemCheckError, match=r"user_budgets\[1\]\.max_band"):
        call_command("check")


def test_celery_worker_and_beat_exit_on_an_invalid_tier(tmp_path, settings):
    settings.CLUSTER_CONFIG = write(tmp_path, "cluster.toml", INVALID_TIER_TOML)

    with pytest.raises(SystemExit, match=r"user_budgets\[1\]\.max_band"):
        refuse_invalid_cluster_config(sender=None)


def test_celery_worker_starts_on_a_valid_config(settings):
    settings.CLUSTER_CONFIG = ""
    refuse_invalid_cluster_config(sender=None)  # no SystemExit


# --- grant expiry ----------------------------------------------------------------------------------


def grant(user: str, state: str, expires_in: timedelta | None, **fields) -> UpliftGrant:
    now = timezone.now()
    return UpliftGrant.objects.create(
        user_id=user,
        reason="paper deadline",
        duration_seconds=3600,
        state=state,
        starts_at=None if expires_in is None else now + expires_in - timedelta(hours=1),
        expires_at=None if expires_in is None else now + expires_in,
        **fields,
    )


def test_expire_uplifts_expires_only_approved_grants_past_their_expiry():
    due = grant("alice", UpliftGrant.State.APPROVED, timedelta(minutes=-1), max_band=Band.INTERACTIVE)
    live = grant("bob", UpliftGrant.State.APPROVED, timedelta(minutes=30), budget_limit=9000)
    requested = grant("charlie", UpliftGrant.State.REQUESTED, None)
    denied = grant("charlie", UpliftGrant.State.DENIED, timedelta(minutes=-5))

    assert expire_uplifts(timezone.now()) == 1

    states = dict(UpliftGrant.objects.values_list("pk", "state"))
    assert states == {due.pk: "expired", live.pk: "approved", requested.pk: "requested", denied.pk: "denied"}


def test_expire_uplifts_at_exactly_the_expiry_expires():
    g = grant("alice", UpliftGrant.State.APPROVED, timedelta(minutes=10))

    assert expire_uplifts(g.expires_at) == 1


def test_expire_uplifts_audits_each_grant_once():
    g = grant("alice", UpliftGrant.State.APPROVED, timedelta(minutes=-1), max_band=Band.INTERACTIVE, budget_limit=0)

    expire_uplifts(timezone.now())
    assert expire_uplifts(timezone.now()) == 0

    [entry] = AuditEntry.objects.all()
    assert entry.actor_name == "grant-expiry"
    assert entry.action == "uplift.expire"
    assert entry.target == f"uplift {g.pk} for alice"
    assert entry.before == {"state": "approved", "max_band": "interactive", "budget_limit": 0}
    assert entry.after == {"state": "expired", "max_band": "interactive", "budget_limit": 0}


def test_beat_expires_uplifts_every_minute():
    entry = settings.CELERY_BEAT_SCHEDULE["expire-uplifts"]

    assert entry["task"] == "scheduler.expire_uplifts"
    assert entry["schedule"] == 60.0


def test_expire_uplifts_task_runs_the_expiry():
    from scheduler import tasks

    grant("alice", UpliftGrant.State.APPROVED, timedelta(minutes=-1))

    tasks.expire_uplifts()  # called directly: the task body, no broker

    assert UpliftGrant.objects.get().state == "expired"
