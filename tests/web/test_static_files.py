"""Static files are served by the application itself, as under ``make run`` and gunicorn: with
debug off, compressed, under content-hashed names cached for a year (WhiteNoise)."""

from __future__ import annotations

import re

import pytest
from django.templatetags.static import static

ASSETS = ["scheduler/iris.css", "scheduler/htmx.min.js", "admin/css/base.css"]


@pytest.mark.parametrize("asset", ASSETS)
def test_static_asset_is_served_hashed_compressed_and_cached_with_debug_off(client, settings, asset):
    assert not settings.DEBUG
    url = static(asset)
    assert re.search(r"\.[0-9a-f]{12}\.(css|js)$", url), url  # cache-busting name from the manifest
    response = client.get(url, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "max-age=315360000" in response["Cache-Control"] and "immutable" in response["Cache-Control"]


def test_console_pages_link_the_hashed_assets(client, alice):
    from tests.personas import PASSWORD

    client.login(username="alice", password=PASSWORD)
    page = client.get("/queue/").content.decode()
    for asset in ("scheduler/iris.css", "scheduler/htmx.min.js"):
        assert static(asset) in page


def test_favicon_ico_is_answered_not_a_404_warning(client, caplog):
    """Browsers ask for /favicon.ico: it used to be a 404 and a WARNING line on every page load."""
    import logging

    with caplog.at_level(logging.WARNING, logger="django.request"):
        answer = client.get("/favicon.ico")
    assert answer.status_code == 301
    icon = client.get(answer.headers["Location"])
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
    assert [r for r in caplog.records if r.name == "django.request"] == []
