"""``make run`` started by an ordinary user says once that its tasks are not isolated.

The product as the README starts it, but as uid 1000: a user namespace maps this (root) process
to an ordinary user, so ``id -u`` in the Makefile and ``os.geteuid()`` in each of the six demo
agents see a user that cannot isolate attempts, while the checkout stays readable and writable
as it is for root. Without the Makefile's IRIS_AGENT_SHARED_NOTICE_GIVEN, each agent would warn
as well: seven notices instead of one.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from benchmarks.soak import Product, free_port

pytestmark = [pytest.mark.shipped, pytest.mark.e2e]

AS_ORDINARY_USER = ("unshare", "--user", "--map-user=1000", "--map-group=1000")
NOTICE = "tasks are not isolated from each other"
AGENTS = ("cpu-1", "cpu-2", "slice-a-0", "slice-a-1", "slice-a-2", "slice-a-3")


def user_namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*AS_ORDINARY_USER, "id", "-u"], capture_output=True, text=True)
    return probe.returncode == 0 and probe.stdout.strip() == "1000"


@pytest.mark.skipif(not user_namespaces_work(), reason="needs unshare --user (an unprivileged user namespace)")
def test_make_run_as_an_ordinary_user_says_once_that_tasks_are_not_isolated(tmp_path):
    product = Product(tmp_path / "data", free_port(), demo_load=False, run_under=AS_ORDINARY_USER)
    try:
        assert product.wait_until_up(timeout=240) is not None, f"make run never served:\n{product.log()[-6000:]}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(f"agent {a} registered" in product.log() for a in AGENTS):
            time.sleep(1)
        log = product.log()
    finally:
        product.stop()

    missing = [a for a in AGENTS if f"agent {a} registered" not in log]
    assert not missing, f"agents that never registered: {missing}\n{log[-6000:]}"
    notices = [line for line in log.splitlines() if NOTICE in line]
    assert len(notices) == 1, "\n".join(notices)
    assert notices[0].startswith("make run: not started as root"), notices[0]
