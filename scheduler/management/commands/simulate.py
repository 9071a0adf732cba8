"""Run the scheduling decision on a JSON snapshot and print the decision. Touches no database."""

import sys

import orjson
from django.core.management.base import BaseCommand, CommandError

from scheduler.core.decision import collector_paused, decide
from scheduler.core.wire import SnapshotError, decision_to_json, snapshot_from_json


class Command(BaseCommand):
    help = "Read a JSON snapshot from FILE (or - for stdin), decide, print the decision as JSON."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("file", help="Snapshot JSON file, or - for standard input.")
        parser.add_argument("--indent", type=int, default=2, choices=(0, 2), help="2 (the default) or 0 for one line.")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        # The snapshot's objects are all live until the decision is written: collections on the
        # way would only rescan them (see collector_paused).
        with collector_paused():
            try:
                raw = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise CommandError(f"{path}: not valid JSON: {exc}") from None
            try:
                snapshot = snapshot_from_json(raw)
            except SnapshotError as exc:
                raise CommandError(f"{path}: {exc}") from None
            decision = decision_to_json(decide(snapshot))
            text = orjson.dumps(decision, option=orjson.OPT_INDENT_2 if options["indent"] else 0)
        self.stdout.write(text.decode())
