"""Reconcile the cluster config's budget tiers into the budget table (idempotent)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.budgets.tiers import reconcile_budget_tiers
from scheduler.foundation.cluster_config import ClusterConfigError, read_cluster_config


class Command(BaseCommand):
    help = (
        "Upsert a budget row for every user the cluster config's tiers list (later tiers win). "
        "Without IRIS_CLUSTER_CONFIG (or --config) there is nothing to do."
    )
    # The command reports an invalid config itself, and --config may name another file than
    # the (possibly broken) IRIS_CLUSTER_CONFIG the system check looks at.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--config", help="cluster config file (default: IRIS_CLUSTER_CONFIG)")

    def handle(self, *args, **options):
        path = options["config"] or settings.CLUSTER_CONFIG
        if not path:
            self.stdout.write("No cluster config (IRIS_CLUSTER_CONFIG is empty): nothing to reconcile.")
            return
        try:
            config = read_cluster_config(path)
        except ClusterConfigError as exc:
            message = str(exc)
            raise CommandError(message if str(path) in message else f"{path}: {message}") from None
        changed = reconcile_budget_tiers(config)
        users = len({user for tier in config.user_budgets for user in tier.user_ids})
        self.stdout.write(
            f"Reconciled {len(config.user_budgets)} tier(s) for {users} user(s) from {path}: {changed} row(s) changed."
        )
