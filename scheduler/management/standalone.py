"""``manage.py simulate`` without setting up Django.

``simulate`` runs a pure function (``scheduler.core.simulate``) on a file, yet as a Django
command it first loads every app, DRF and Celery included: 0.8 s of a 3 s run at 100,000
tasks. ``manage.py`` therefore hands ``simulate`` to :func:`main` here before it imports
Django. This module imports nothing of Django; the management command
(``commands/simulate.py``) stays the one definition of the command's arguments and help, and
both call the same :func:`simulate_file`.

The fast path takes only the plain forms (``simulate [--indent 0|2] FILE``, ``--indent=N``,
``-`` for stdin). Anything else (``-h``, Django's own options such as ``--settings`` or
``--traceback``, a bad or missing argument) returns ``None`` and ``manage.py`` runs the Django
command, so help, usage and argument errors are Django's own. What the fast path prints is what
the command prints: the decision and a newline on stdout, exit 0; or ``CommandError: <message>``
on stderr, exit 1 (not coloured on a terminal, where Django colours it).
"""

from __future__ import annotations

import gc
import os
import sys

COMMAND = "simulate"


def simulate_file(path: str, indent: int, kept: list | None = None) -> bytes:
    """The decision on the snapshot at ``path`` (``-``: standard input) as JSON and a newline;
    raise ``SimulateError`` with the command's message. ``kept``: see ``simulate``."""
    from scheduler.core.simulate import simulate

    # The text is not kept here: ``simulate`` drops it once parsed.
    return simulate(_read(path), path, indent, kept)


def _read(path: str) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        from scheduler.core.simulate import SimulateError

        raise SimulateError(f"cannot read {path}: {exc.strerror}") from None


def parse_args(args: list[str]) -> tuple[str, int] | None:
    """``(file, indent)`` for the plain forms of ``simulate``'s arguments, else ``None``."""
    path = None
    indent = 2
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--indent" and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        elif arg.startswith("--indent="):
            value = arg.removeprefix("--indent=")
            i += 1
        elif arg == "-" or not arg.startswith("-"):
            if path is not None:
                return None
            path = arg
            i += 1
            continue
        else:
            return None
        try:
            indent = int(value)  # as argparse's type=int
        except ValueError:
            return None
        if indent not in (0, 2):
            return None
    return None if path is None else (path, indent)


def main(argv: list[str], kept: list | None = None) -> int | None:
    """Run ``manage.py simulate`` for ``argv`` (``sys.argv``) and return its exit code, or
    ``None`` when it is not a plain ``simulate`` and Django must run it. ``kept`` receives the
    run's large objects instead of their being freed (see ``simulate``)."""
    if len(argv) < 2 or argv[1] != COMMAND:
        return None
    parsed = parse_args(argv[2:])
    if parsed is None:
        return None
    # A short-lived process whose objects all live to the end: the cyclic collector would only
    # rescan them.
    gc.disable()
    from scheduler.core.simulate import SimulateError

    try:
        text = simulate_file(*parsed, kept)
    except SimulateError as exc:
        sys.stderr.write(f"CommandError: {exc}\n")
        return 1
    out = sys.stdout.buffer
    out.write(text)
    out.flush()
    return 0


def run(argv: list[str]) -> None:
    """:func:`main`, then exit without tearing down the snapshot's objects (the output is
    flushed first); returns only when Django must run the command."""
    # The snapshot, the decision and its document stay referenced here until ``os._exit``:
    # freed on the way out of ``simulate`` instead, they took 1.9% of its instructions (112 M of
    # 5,987 M on the 100k x 10k independent snapshot).
    kept: list = []
    code = main(argv, kept)
    if code is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
