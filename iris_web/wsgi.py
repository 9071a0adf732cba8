"""WSGI entry point (gunicorn/uwsgi in production, ``runserver`` in development)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
application = get_wsgi_application()
