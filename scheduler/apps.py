"""App configuration."""

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Iris scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from scheduler import checks  # noqa: F401  (registers the start-up checks)
