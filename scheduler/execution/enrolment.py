"""Worker enrolment: each worker agent's own credential, bound to its worker's name.

An operator mints a worker's credential (``manage.py worker_credential NAME``, or
``POST workers/{name}:credential``) and hands it to the agent of that worker, which sends it as
``Authorization: Worker <credential>``. The agent API then lets it act only as that worker:
register it, heartbeat as it (and receive its orders), report attempts placed on it. A
credential is not a user, so it can do nothing else. Minting again replaces the worker's
credential (the old one stops working at once); revoking deletes it.

Only the credential's SHA-512 digest is stored (the hash django-rest-knox uses for API tokens).
It is a 256-bit random string, so it is looked up by its digest: no salt or slow hash is
needed, and comparing digests leaks nothing about the credential.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from knox.crypto import create_token_string, hash_token

from scheduler.foundation.access import require_operator
from scheduler.foundation.errors import NotFound
from scheduler.foundation.inputs import parse_worker_name
from scheduler.models import WorkerCredential

log = logging.getLogger(__name__)

# Starts every worker credential, so one pasted where an API token goes (or found in a log or a
# repository by a secret scanner) is recognisable.
CREDENTIAL_PREFIX = "iwc_"
# The longest credential looked at: the prefix and knox's 64 hex characters, with room to spare.
MAX_CREDENTIAL_LENGTH = 128


def issue_worker_credential(name: Any, *, by: str) -> str:
    """Mint the credential of worker ``name`` (which need not be registered yet), replacing any
    earlier one, and return it: it is shown this once. ``by`` names who asked, for the log."""
    worker_name = parse_worker_name(name)
    credential = CREDENTIAL_PREFIX + create_token_string()
    with transaction.atomic():
        WorkerCredential.objects.update_or_create(
            worker_name=worker_name, defaults={"digest": hash_token(credential), "created_by": by[:150]}
        )
    log.info(
        "credential of worker %s minted by %s",
        worker_name,
        by,
        extra={"worker": worker_name, "actor": by, "action": "worker.credential"},
    )
    return credential


def mint_worker_credential(actor, name: Any) -> str:
    """Operators mint workers' credentials: :func:`issue_worker_credential`."""
    require_operator(actor, "mint worker credentials")
    return issue_worker_credential(name, by=actor.username)


def revoke_worker_credential(name: Any, *, by: str) -> None:
    """Delete worker ``name``'s credential: its agent can no longer call the agent API."""
    worker_name = parse_worker_name(name)
    deleted, _ = WorkerCredential.objects.filter(worker_name=worker_name).delete()
    if not deleted:
        raise NotFound(f"worker {worker_name} has no credential", field="name")
    log.info(
        "credential of worker %s revoked by %s",
        worker_name,
        by,
        extra={"worker": worker_name, "actor": by, "action": "worker.credential_revoke"},
    )


def worker_for_credential(credential: str) -> str | None:
    """The name of the worker ``credential`` belongs to, or None for no (or a revoked) credential."""
    if not credential.startswith(CREDENTIAL_PREFIX) or len(credential) > MAX_CREDENTIAL_LENGTH:
        return None
    return WorkerCredential.objects.filter(digest=hash_token(credential)).values_list("worker_name", flat=True).first()
