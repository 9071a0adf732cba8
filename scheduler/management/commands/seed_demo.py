"""Create the demo users and the demo agents' credentials (idempotent), and print how to sign in.

Budgets come from the cluster config (``make run`` uses ``config/cluster.demo.toml``: alice
and bob have tiers, carol is unlisted and gets the defaults). Each worker agent the
``Procfile`` starts gets its own credential, bound to its worker's name, in
``IRIS_DATA_DIR/worker-credentials/<name>`` (the agent's ``--token-file``); a credential that
is still valid is kept, so running this again changes nothing.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from scheduler.budgets.rules import budget_defaults, effective_budget_for
from scheduler.execution.enrolment import issue_worker_credential, worker_for_credential
from scheduler.management.commands.worker_credential import write_secret
from scheduler.foundation.roles import ensure_groups
from scheduler.notification_models import NotificationSettings
from scheduler.notifications.preferences import update_preferences

DEMO_PASSWORD = "iris-demo"
# (username, role) — alice and bob are researchers, carol is unlisted in any tier.
DEMO_USERS = [
    ("admin", "admin"),
    ("ops", "operator"),
    ("alice", "researcher"),
    ("bob", "researcher"),
    ("carol", "researcher"),
]
# The worker agents the Procfile starts (a test ties the two), and where their credentials go.
DEMO_WORKERS = ("cpu-1", "cpu-2", "slice-a-0", "slice-a-1", "slice-a-2", "slice-a-3")
CREDENTIALS_DIR = "worker-credentials"
# Demo addresses (the demo's mail goes to files under IRIS_DATA_DIR/mail, never out).
DEMO_MAIL_DOMAIN = "iris.example"
# What the researchers are told of by email until they choose (admin has the admins' default:
# uplift requests), so the demo's settings pages show notifications being sent.
DEMO_EMAIL_EVENTS = ["finished", "failed", "preempted"]


class Command(BaseCommand):
    help = "Create demo users (admin, ops, alice, bob, carol) with a shared demo password, and the agents' credentials."

    def handle(self, *args, **options):
        admins, operators = ensure_groups()
        User = get_user_model()
        for username, role in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(DEMO_PASSWORD)
            # Admins and operators may open the Django admin; their groups say what they see there.
            user.is_staff = role in ("admin", "operator")
            user.email = user.email or f"{username}@{DEMO_MAIL_DOMAIN}"
            user.save()
            if role == "admin":
                user.groups.add(admins)
            elif role == "operator":
                user.groups.add(operators)
            if role == "researcher" and not NotificationSettings.objects.filter(user=user).exists():
                update_preferences(user, {"email_events": DEMO_EMAIL_EVENTS})

        directory = settings.DATA_DIR / CREDENTIALS_DIR
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for worker in DEMO_WORKERS:
            path = directory / worker
            try:
                kept = worker_for_credential(path.read_text().strip()) == worker
            except OSError:
                kept = False
            if not kept:
                write_secret(str(path), issue_worker_credential(worker, by="seed_demo"))

        names = ", ".join(u for u, _ in DEMO_USERS)
        self.stdout.write(f"Demo users: {names} (password '{DEMO_PASSWORD}'). Console: {settings.CONSOLE_URL}")
        self.stdout.write(f"  CLI: .venv/bin/iris login --server {settings.CONSOLE_URL.rstrip('/')}")
        defaults = budget_defaults()
        for username, _ in DEMO_USERS[2:]:
            budget = effective_budget_for(username)
            limit = f"{budget.budget_limit:,} points" if budget.budget_limit else "unlimited"
            self.stdout.write(f"  {username}: budget {limit}, max band {budget.max_band.wire}")
        self.stdout.write(
            f"  (users no tier lists get {defaults.budget_limit:,} points; admin submits PRODUCTION and SYSTEM)"
        )
        self.stdout.write(f"Worker agents {', '.join(DEMO_WORKERS)} use their own credentials in {directory}/.")
        self.stdout.write(
            f"Notification emails ({', '.join(DEMO_EMAIL_EVENTS)} for the researchers, uplift requests for admin) "
            f"are written to {settings.EMAIL_FILE_PATH}/; each user's Notifications page shows their state."
        )
