"""The ``iris`` command-line client: a thin layer over the REST API (``/api/v1/``).

Its own distribution (``cli/pyproject.toml``, no dependencies beyond Python's standard
library), installed alone on a laptop with ``pip install ./cli``; it imports nothing of the
server, so it starts fast and runs anywhere Python does:
``client`` speaks HTTP and keeps the credentials, ``formatting`` renders answers for people,
``commands`` maps each command to one or two requests, ``main`` parses the arguments and runs
one (``arguments`` the option types, ``cells`` the table cells).
"""

from iris_cli.main import main

__all__ = ["main"]
