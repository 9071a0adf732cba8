"""Mint (or revoke) a worker agent's credential, bound to the worker's name.

    python manage.py worker_credential cpu-1 --file /etc/iris/cpu-1.credential
    python manage.py worker_credential cpu-1            # prints it, once
    python manage.py worker_credential cpu-1 --revoke

Minting replaces the worker's earlier credential: its old agent is refused from then on. The
server keeps only the credential's hash; ``--file`` writes it readable by its owner only, for
``iris_worker --token-file``. docs/operations.md ("Worker agents") describes the enrolment.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from scheduler.foundation.errors import ServiceError
from scheduler.execution.enrolment import issue_worker_credential, revoke_worker_credential


def write_secret(path: str, secret: str) -> None:
    """Write ``secret`` to ``path`` with mode 0600 (whatever the umask), replacing the file."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret + "\n")


class Command(BaseCommand):
    help = "Mint a worker agent's credential (replacing its earlier one), or revoke it."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the worker's name, as its agent's --name")
        parser.add_argument(
            "--file", default="", help="write the credential to this file (mode 0600) instead of printing it"
        )
        parser.add_argument("--revoke", action="store_true", help="revoke the worker's credential instead")

    def handle(self, *args, **options):
        name = options["name"]
        try:
            if options["revoke"]:
                revoke_worker_credential(name, by="manage.py worker_credential")
                self.stdout.write(f"Revoked the credential of worker {name}.")
                return
            credential = issue_worker_credential(name, by="manage.py worker_credential")
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        if options["file"]:
            write_secret(options["file"], credential)
            self.stdout.write(f"Credential of worker {name} written to {options['file']} (iris_worker --token-file).")
        else:
            self.stdout.write(credential)
