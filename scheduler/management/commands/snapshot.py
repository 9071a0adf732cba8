"""Print the live cluster state as a JSON snapshot (the format `simulate` reads)."""

import json

from django.core.management.base import BaseCommand

from scheduler.core.wire import snapshot_to_json
from scheduler.store.clock import now_ms
from scheduler.tick.load import load_snapshot


class Command(BaseCommand):
    help = "Print the live cluster state as JSON (see docs/snapshot-format.md)."

    def add_arguments(self, parser):
        parser.add_argument("--now-ms", type=int, default=None, help="Pretend the snapshot is read at this time.")
        parser.add_argument("--indent", type=int, default=2)

    def handle(self, *args, **options):
        loaded = load_snapshot(options["now_ms"] if options["now_ms"] is not None else now_ms())
        indent = options["indent"] or None
        self.stdout.write(json.dumps(snapshot_to_json(loaded.snapshot), indent=indent))
