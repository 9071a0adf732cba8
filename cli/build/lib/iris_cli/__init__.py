"""The ``iris`` command-line client: a thin layer over the REST API (``/api/v1/``).

Its own distribution (``cli/pyproject.toml``, no dependencies beyond Python's standard
library), installed alone on a laptop with ``pip install ./cli``; it imports nothing of the
server, so it starts fast and runs anywhere Python does:
``client`` speaks HTTP and keeps the credentials, ``formatting`` renders answers for people,
``commands`` parses arguments and maps each command to one or two requests.
"""

from iris_cli.commands import main

__all__ = ["main"]
