"""The Celery application. Configuration comes from Django settings (``CELERY_*``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")

app = Celery("iris_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
