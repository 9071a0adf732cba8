"""What every part of the shell stands on: errors and their JSON, input parsing, roles and access,
the cluster config, metrics instruments and the way use cases ask Celery for work (``enqueue``).

These modules import only the core and ``scheduler.models``; the store, the backends, the use
cases and the interfaces import them (an import-linter contract in ``pyproject.toml``)."""
