"""The product as the README starts it: ``make run DEMO_LOAD=1``, looked at in a browser.

This runs the very process set a newcomer gets (the Makefile's ``run``: setup, seed_demo, then
the Procfile through honcho, with the embedded broker and SQLite in a new data dir on a free
port; ``IRIS_DATABASE_URL``/``IRIS_REDIS_URL`` are removed from its environment) and, for at
least three minutes, checks what a user would see: a styled page with htmx loaded, a queue that
shows newer ticks by itself, a job submitted from the console placed and its page updating
without a reload, no process of the set exiting, and no CRITICAL or traceback in the log.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from benchmarks.soak import Product, free_port, log_problems, process_exits
from tests.browser.conftest import save_screenshot

pytestmark = [pytest.mark.shipped, pytest.mark.browser]

# How long the product must hold up under the demo load while it is looked at.
SOAK_SECONDS = 180
DEMO_PASSWORD = "iris-demo"  # seed_demo's
TICK = re.compile(r"As of tick (\d+)")


@pytest.fixture
def product(tmp_path):
    running = Product(tmp_path / "data", free_port(), demo_load=True)
    try:
        came_up = running.wait_until_up(timeout=240)
        assert came_up is not None, f"make run never served the console:\n{running.log()[-6000:]}"
        yield running
    finally:
        running.stop()


def sign_in(page, url: str, username: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(re.compile(r".*/queue/.*"))


def shown_tick(page) -> int:
    match = TICK.search(page.inner_text("#queue"))
    return int(match.group(1)) if match else 0


def mark_document(page) -> None:
    """Tag the loaded document; a reload would lose the tag."""
    page.evaluate("window.__loadedOnce = true")


def still_same_document(page) -> bool:
    return page.evaluate("window.__loadedOnce === true")


def test_make_run_serves_a_styled_live_console_that_stays_up(product, page):
    started = time.monotonic()
    sign_in(page, product.url, "alice")

    # Styled, and htmx loaded: a computed style from iris.css and the htmx global, not a 200 alone.
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(245, 246, 248)"
    assert page.evaluate("typeof window.htmx") == "object"
    save_screenshot(page, "shipped-queue")

    # The queue shows a newer tick by itself. (Predicates are functions, not expressions: the
    # console's Content Security Policy forbids the eval Playwright needs for an expression.)
    mark_document(page)
    first = shown_tick(page)
    page.wait_for_function(
        f"() => {{ const m = document.querySelector('#queue').innerText.match(/As of tick (\\d+)/);"
        f" return m && Number(m[1]) > {first}; }}",
        timeout=60_000,
    )
    assert still_same_document(page) and shown_tick(page) > first

    # A job submitted through the console is placed, and its page follows without a reload.
    name = f"shipped-{uuid.uuid4().hex[:6]}"
    page.goto(f"{product.url}/jobs/new/")
    page.fill("input[name=name]", name)
    page.fill("[name=command]", "sleep 15")
    page.fill("input[name=cpu]", "0.5")
    page.fill("input[name=memory]", "256Mi")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(rf".*/jobs/alice/{name}/$"))
    mark_document(page)
    task_state = "document.querySelector('#live table tbody tr td:nth-child(2)').innerText.trim()"
    as_loaded = page.evaluate(task_state)
    page.wait_for_function(
        f"() => {{ const s = {task_state}; return s !== {as_loaded!r} && (s === 'running' || s === 'succeeded'); }}",
        timeout=90_000,
    )
    assert still_same_document(page), "the job page reloaded instead of refreshing itself"
    save_screenshot(page, "shipped-job")

    # Hold up under the demo load for the rest of the time, looking now and then.
    while time.monotonic() - started < SOAK_SECONDS:
        assert product.alive(), f"make run stopped by itself:\n{product.log()[-6000:]}"
        time.sleep(5)
    page.goto(f"{product.url}/queue/")
    assert page.evaluate("typeof window.htmx") == "object"

    log = product.log()
    assert process_exits(log) == [], log[-6000:]
    criticals, tracebacks = log_problems(log)
    assert (criticals, tracebacks) == (0, 0), log[-6000:]
