"""Create the demo users (idempotent) and print how to sign in."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from scheduler.roles import ensure_groups

DEMO_PASSWORD = "iris-demo"
# (username, role) — alice and bob are researchers, carol is unlisted in any tier.
DEMO_USERS = [("admin", "admin"), ("ops", "operator"), ("alice", "researcher"), ("bob", "researcher"), ("carol", "researcher")]


class Command(BaseCommand):
    help = "Create demo users (admin, ops, alice, bob, carol) with a shared demo password."

    def handle(self, *args, **options):
        admins, operators = ensure_groups()
        User = get_user_model()
        for username, role in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(DEMO_PASSWORD)
                user.is_staff = role == "admin"
                user.save()
            if role == "admin":
                user.groups.add(admins)
            elif role == "operator":
                user.groups.add(operators)
        names = ", ".join(u for u, _ in DEMO_USERS)
        self.stdout.write(
            f"Demo users: {names} (password '{DEMO_PASSWORD}'). Console: http://127.0.0.1:8000/"
        )
