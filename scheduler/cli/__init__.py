"""The ``iris`` command-line client: a thin layer over the REST API (``/api/v1/``).

It imports nothing from Django, so it starts fast and runs anywhere Python does:
``client`` speaks HTTP and keeps the credentials, ``formatting`` renders answers for people,
``commands`` parses arguments and maps each command to one or two requests.
"""

from scheduler.cli.commands import main

__all__ = ["main"]
