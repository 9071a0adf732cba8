"""Run the scheduling decision on a JSON snapshot and print the decision. Touches no database.

``manage.py simulate`` with plain arguments does not come here: ``manage.py`` runs it without
setting up Django (``scheduler/management/standalone.py``, the same ``simulate_file``). This
command is what ``call_command``, ``manage.py help`` and the other argument forms run.
"""

from django.core.management.base import BaseCommand, CommandError

from scheduler.core.simulate import INDENTS, SimulateError
from scheduler.management.standalone import simulate_file


class Command(BaseCommand):
    help = "Read a JSON snapshot from FILE (or - for stdin), decide, print the decision as JSON."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("file", help="Snapshot JSON file, or - for standard input.")
        parser.add_argument("--indent", type=int, default=2, choices=INDENTS, help="2 (the default) or 0 for one line.")

    def handle(self, *args, **options):
        try:
            text = simulate_file(options["file"], options["indent"])
        except SimulateError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(text.decode())
