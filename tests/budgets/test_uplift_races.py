"""Two identical uplift requests at the same moment on PostgreSQL: exactly one is recorded.

Each request's duplicate check sees only committed rows, so without a lock both pass it. The
two threads meet after inserting, before committing: without the lock both get there; with it
the second waits at the lock, the rendezvous lets the first commit, and the second's check then
sees the first request and refuses.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from scheduler.budgets import writes
from scheduler.budgets.writes import request_uplift
from scheduler.foundation.errors import FailedPrecondition
from scheduler.models import UpliftGrant
from tests.races import RENDEZVOUS_SECONDS, Rendezvous

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_identical_requests_at_once_record_one(monkeypatch, alice):
    rendezvous = Rendezvous()
    names: dict[int, str] = {}
    real_audit = writes.audit

    def audit_then_meet(*args, **kwargs):
        entry = real_audit(*args, **kwargs)
        rendezvous.wait(names[threading.get_ident()])
        return entry

    monkeypatch.setattr(writes, "audit", audit_then_meet)
    ready = threading.Barrier(2)
    refused: list[FailedPrecondition] = []
    errors: list[BaseException] = []

    def ask(name: str) -> None:
        names[threading.get_ident()] = name
        try:
            rendezvous.register(name)
            ready.wait(timeout=RENDEZVOUS_SECONDS)
            request_uplift(alice, budget_limit=5000, reason="paper deadline", duration_seconds=3600)
        except FailedPrecondition as exc:
            refused.append(exc)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            rendezvous.done.add(name)
            connection.close()

    threads = [threading.Thread(target=ask, args=(f"request{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RENDEZVOUS_SECONDS * 2)

    assert not errors, errors
    assert UpliftGrant.objects.filter(user_id="alice", state=UpliftGrant.State.REQUESTED).count() == 1
    assert len(refused) == 1 and "already asks for the same" in refused[0].message
