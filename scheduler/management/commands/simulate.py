"""Run the scheduling decision on a JSON snapshot and print the decision. Touches no database."""

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from scheduler.core.decision import decide
from scheduler.core.wire import SnapshotError, decision_to_json, snapshot_from_json


class Command(BaseCommand):
    help = "Read a JSON snapshot from FILE (or - for stdin), decide, print the decision as JSON."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("file", help="Snapshot JSON file, or - for standard input.")
        parser.add_argument("--indent", type=int, default=2)

    def handle(self, *args, **options):
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path}: not valid JSON: {exc}") from None
        try:
            snapshot = snapshot_from_json(raw)
        except SnapshotError as exc:
            raise CommandError(f"{path}: {exc}") from None
        indent = options["indent"] or None
        self.stdout.write(json.dumps(decision_to_json(decide(snapshot)), indent=indent))
