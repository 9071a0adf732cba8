"""The demo's setup commands: seed_demo (idempotent, writes the agents' token) and demo_load."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from scheduler.api.agent import AGENT_GROUP, is_agent
from scheduler.models import Job

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent_and_writes_the_agents_token_readable_only_by_its_owner(settings, tmp_path):
    settings.DATA_DIR = tmp_path

    call_command("seed_demo", stdout=io.StringIO())
    first = (tmp_path / "demo-agent-token").read_text().strip()
    call_command("seed_demo", stdout=io.StringIO())

    agent = get_user_model().objects.get(username="iris-agent")
    assert is_agent(agent) and agent.groups.filter(name=AGENT_GROUP).exists()
    assert Token.objects.get(user=agent).key == first == (tmp_path / "demo-agent-token").read_text().strip()
    assert (tmp_path / "demo-agent-token").stat().st_mode & 0o777 == 0o600
    assert get_user_model().objects.filter(username__in=["admin", "ops", "alice", "bob", "carol"]).count() == 5


def test_demo_load_submits_a_mix_of_bands_sizes_and_gangs_through_the_submission_rules(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    out = io.StringIO()

    call_command("demo_load", count=12, interval=0, seed=3, max_pending=10_000, stdout=out)

    jobs = list(Job.objects.all())
    assert len(jobs) == 12
    assert {j.user for j in jobs} <= {"alice", "bob", "carol", "admin"}
    assert len({j.band for j in jobs}) >= 2
    assert all(j.command[:2] == ["sh", "-c"] for j in jobs)
    assert "demo load: submitted 12 job(s)" in out.getvalue()
