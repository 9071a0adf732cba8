"""The job page's priority factors table in a real browser: its detail column reads as lines of
text, not one to three words a line (issue 28)."""

from __future__ import annotations

import pytest

from scheduler.tick.run import run_tick
from tests.browser.conftest import sign_in
from tests.personas import NOW_MS, PASSWORD, make_job, make_user, make_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_priority_factor_details_get_room_to_read(live_server, page, screenshot):
    make_user("alice")
    make_worker("w1", cpu=1, memory_gib=4)
    make_job("/alice/first", cpu=1)
    make_job("/alice/waiting", cpu=1)
    run_tick(NOW_MS)

    sign_in(page, live_server, "alice", PASSWORD)
    page.goto(f"{live_server.url}/jobs/alice/waiting/")
    page.wait_for_selector("#priority table")
    widths = page.evaluate(
        "() => [...document.querySelectorAll('#priority .detail')].map(d => d.getBoundingClientRect().width)"
    )
    assert widths and min(widths) >= 240, widths  # about 40 characters of small text a line
    table, card = page.evaluate(
        "() => { const t = document.querySelector('#priority table'); const c = t.closest('.card');"
        " return [t.getBoundingClientRect().right, c.getBoundingClientRect().right]; }"
    )
    assert table <= card, (table, card)  # and nothing is cut off
    screenshot("job-priority-factors")
