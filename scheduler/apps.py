"""App configuration."""

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Iris scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from scheduler import checks  # noqa: F401  (registers the start-up checks)
        from scheduler.foundation.roles import ensure_groups_after_migrate

        post_migrate.connect(ensure_groups_after_migrate, sender=self, dispatch_uid="scheduler.ensure_groups")
