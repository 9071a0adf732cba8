"""A deliverer killed mid-delivery (SIGKILL, as a Celery worker killed by the OOM killer or a
redeploy): the delivery is neither lost nor done twice by a receiver that keys on the
``Idempotency-Key``.

What is guaranteed is **at least once with a stable key**: a row is marked sent only after a
2xx, so a deliverer killed before that leaves it to be claimed again once its claim runs out.
Killed *before* its request reached the receiver, the receiver gets it once. Killed *after* the
receiver got it (and did its work) but before the row was marked, the receiver gets it a second
time with the same key, and does nothing the second time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from scheduler.events.record import Draft, record
from scheduler.events.sequence import sequence_events
from scheduler.notification_models import NotificationDelivery
from scheduler.notifications.delivery import claim_seconds, deliver_due
from scheduler.notifications.fanout import fan_out
from scheduler.notifications.preferences import update_preferences
from tests.notifications.receiver import Receiver

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SECRET = "a-secret-of-twenty-chars"
State = NotificationDelivery.State

# The child: a real deliverer. "before": it stops (until killed) after claiming, before its
# request; "after": it sends, and the receiver holds its answer until the child is killed.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import django
    django.setup()
    from scheduler.notifications import delivery

    marker, mode = sys.argv[1], sys.argv[2]
    if mode == "before":
        def hang(*args, **kwargs):
            open(marker, "w").write(str(os.getpid()))
            time.sleep(120)
        delivery.post_event = hang
    delivery.deliver_due()
    """
)


def kill_a_deliverer(tmp_path: Path, mode: str, receiver: Receiver) -> None:
    marker = tmp_path / "claimed"
    env = dict(os.environ)
    db = connection.settings_dict
    env["IRIS_DATABASE_URL"] = f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "iris_web.settings"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), mode], env=env, cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() if mode == "before" else receiver.got_one.is_set()):
            assert child.poll() is None, "the deliverer ended before it was killed"
            assert time.monotonic() < deadline, "the deliverer never got that far"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()


@pytest.fixture
def receiver():
    r = Receiver(secret=SECRET, hold=threading.Event())
    yield r
    r.close()


@pytest.mark.parametrize("mode", ["before", "after"])
def test_a_deliverer_killed_mid_delivery_neither_loses_nor_doubles_it(alice, receiver, tmp_path, mode):
    update_preferences(alice, {"webhook_url": receiver.url, "webhook_secret": SECRET, "webhook_events": ["failed"]})
    record([Draft("finished", timezone.now(), "alice", "/alice/train", data={"outcome": "failed"})])
    sequence_events()
    fan_out()

    kill_a_deliverer(tmp_path, mode, receiver)

    claimed = NotificationDelivery.objects.get()
    assert (claimed.state, claimed.tries) == (State.SENDING, 1)  # claimed, never marked
    assert len(receiver.received) == (0 if mode == "before" else 1)
    # Not before its claim runs out (the dead deliverer might still have been sending) ...
    assert deliver_due().sent == 0 and NotificationDelivery.objects.get().tries == 1
    # ... then claimed again and sent, with the same key.
    receiver.hold.set()
    after_claim = timezone.now() + timedelta(seconds=claim_seconds() + 1)
    assert deliver_due(clock=lambda: after_claim).sent == 1
    assert deliver_due(clock=lambda: after_claim + timedelta(hours=1)).sent == 0

    row = NotificationDelivery.objects.get()
    assert (row.state, row.tries) == (State.SENT, 2)
    keys = [r.key for r in receiver.received]
    assert keys == [str(row.event_id)] * (1 if mode == "before" else 2)
    assert list(receiver.processed) == [str(row.event_id)]  # the receiver did its work once
    assert all(r.valid for r in receiver.received)
