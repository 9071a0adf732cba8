"""Create the demo users and the demo agents' token (idempotent), and print how to sign in.

Budgets come from the cluster config (``make run`` uses ``config/cluster.demo.toml``: alice
and bob have tiers, carol is unlisted and gets the defaults). The token of the ``iris-agent``
user (group ``iris-agents``) is written to ``IRIS_DATA_DIR/demo-agent-token`` for the local
worker agents that ``make run`` starts.
"""

import os

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from scheduler.api.agent import AGENT_GROUP
from scheduler.budgets.rules import budget_defaults, effective_budget_for
from scheduler.roles import ensure_groups

DEMO_PASSWORD = "iris-demo"
# (username, role) — alice and bob are researchers, carol is unlisted in any tier.
DEMO_USERS = [("admin", "admin"), ("ops", "operator"), ("alice", "researcher"), ("bob", "researcher"), ("carol", "researcher")]
AGENT_USER = "iris-agent"
AGENT_TOKEN_FILE = "demo-agent-token"


class Command(BaseCommand):
    help = "Create demo users (admin, ops, alice, bob, carol) with a shared demo password, and the agents' token."

    def handle(self, *args, **options):
        admins, operators = ensure_groups()
        agents, _ = Group.objects.get_or_create(name=AGENT_GROUP)
        User = get_user_model()
        for username, role in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(DEMO_PASSWORD)
            # Admins and operators may open the Django admin; their groups say what they see there.
            user.is_staff = role in ("admin", "operator")
            user.save()
            if role == "admin":
                user.groups.add(admins)
            elif role == "operator":
                user.groups.add(operators)

        agent, created = User.objects.get_or_create(username=AGENT_USER)
        if created:
            agent.set_unusable_password()
            agent.save()
        agent.groups.add(agents)
        token, _ = Token.objects.get_or_create(user=agent)
        token_file = settings.DATA_DIR / AGENT_TOKEN_FILE
        descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token.key + "\n")

        names = ", ".join(u for u, _ in DEMO_USERS)
        self.stdout.write(f"Demo users: {names} (password '{DEMO_PASSWORD}'). Console: http://127.0.0.1:8000/")
        defaults = budget_defaults()
        for username, _ in DEMO_USERS[2:]:
            budget = effective_budget_for(username)
            limit = f"{budget.budget_limit:,} points" if budget.budget_limit else "unlimited"
            self.stdout.write(f"  {username}: budget {limit}, max band {budget.max_band.wire}")
        self.stdout.write(
            f"  (users no tier lists get {defaults.budget_limit:,} points; admin submits PRODUCTION and SYSTEM)"
        )
        self.stdout.write(f"Worker agents sign in as '{AGENT_USER}' with the token in {token_file}.")
