"""The Django project: settings, URLs, the Celery app. No business logic lives here."""

from iris_web.celery import app as celery_app

__all__ = ["celery_app"]
