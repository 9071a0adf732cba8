"""Headless Chromium (Debian's package) driven by Playwright against a live test server.

Screenshots go to ``test-artifacts/screenshots/``. ``page`` is one signed-out browser context;
``open_page`` opens more (one per persona, each with its own session).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import CHROMIUM

# Playwright's sync API runs an event loop in the test thread; the ORM calls made by the test
# itself (creating users, reading rows) are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1360, "height": 900}


def start_live_server(addr: str):
    """pytest-django's live server, less its test-only static-file handler: requests for static
    files reach WhiteNoise, which serves the collected, hashed files as under ``make run``."""
    from pytest_django.live_server_helper import LiveServer

    server = LiveServer(addr, start=False)
    server.thread.static_handler = lambda app: app
    server.start()
    return server


@pytest.fixture(scope="session")
def live_server(request):
    """Overrides pytest-django's ``live_server`` (same address rules, same lifetime)."""
    addr = request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost"
    server = start_live_server(addr)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def open_page(browser):
    """Open another signed-out page in its own context (its own cookies)."""
    contexts = []

    def open_():
        context = browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        return context.new_page()

    yield open_
    for context in contexts:
        context.close()


def save_screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def screenshot(page):
    def take(name: str, of=None) -> Path:
        return save_screenshot(of or page, name)

    return take


def sign_in(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
