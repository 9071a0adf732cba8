"""The scheduler state page in a real browser: an operator signs in, sees ticks appear, runs one."""

from __future__ import annotations

import pytest

from scheduler.foundation.roles import ensure_groups
from scheduler.tick.run import run_tick
from tests.browser.conftest import sign_in
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_operator_signs_in_and_sees_the_tick_appear_without_reloading(live_server, page, screenshot):
    from django.contrib.auth import get_user_model

    _, operators = ensure_groups()
    get_user_model().objects.create_user("olivia", password="pw-olivia-123").groups.add(operators)
    make_worker("w1")
    make_job("/alice/train", replicas=3)

    sign_in(page, live_server, "olivia", "pw-olivia-123")
    page.goto(f"{live_server.url}/scheduler/")
    page.wait_for_selector("h1:has-text('Scheduler state')")
    assert "No ticks recorded yet" in page.inner_text("#state")

    run_tick(NOW_MS)
    # The fragment polls every 5 s; the new tick shows up without a reload.
    page.wait_for_selector("#state td:has-text('ms')", timeout=15_000)
    assert "No ticks recorded yet" not in page.inner_text("#state")

    page.click("button:has-text('Run a tick now')")
    page.wait_for_selector(".message-success:has-text('assigned')")
    screenshot("scheduler-state")


def test_the_recent_ticks_table_fits_its_card(live_server, page, screenshot):
    """Issue 28: at 809 px in a 626 px card, it hid its PREEMPTED and EXPIRED columns."""
    from django.contrib.auth import get_user_model

    _, operators = ensure_groups()
    get_user_model().objects.create_user("olivia", password="pw-olivia-123").groups.add(operators)
    make_worker("w1")
    make_job("/alice/train", replicas=3)
    for i in range(3):
        run_tick(NOW_MS + i * 1000)

    sign_in(page, live_server, "olivia", "pw-olivia-123")
    page.goto(f"{live_server.url}/scheduler/")
    page.wait_for_selector("table.ticks")
    table, card = page.evaluate(
        "() => { const t = document.querySelector('table.ticks'); const c = t.closest('.card');"
        " return [t.getBoundingClientRect().right, c.getBoundingClientRect().right]; }"
    )
    assert table <= card, (table, card)
    assert page.is_visible("table.ticks th:has-text('Expired')")
    screenshot("scheduler-state-ticks")
