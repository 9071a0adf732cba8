"""Helpers for the observability tests: scrape /metrics as Prometheus would, and read values."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.tick import run as tick_module
from scheduler.tick.run import run_tick


class Scrape:
    """One parsed /metrics answer: ``scrape.value("iris_ticks_total", outcome="ran")``."""

    def __init__(self, text: str):
        self.text = text
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(self, name: str, **labels) -> float:
        """The sample's value; 0 for a series not (yet) exposed, as Prometheus treats a counter."""
        for sample in self.samples:
            if (
                sample.name == name
                and all(sample.labels.get(k) == v for k, v in labels.items())
                and (set(sample.labels) - {"le"} == set(labels) - {"le"})
            ):
                return sample.value
        return 0.0

    def has(self, name: str, **labels) -> bool:
        return any(s.name == name and all(s.labels.get(k) == v for k, v in labels.items()) for s in self.samples)


@pytest.fixture
def scrape(client):
    """Scrape /metrics from an allowed address (the test client's 127.0.0.1)."""

    def get() -> Scrape:
        response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
        assert response.status_code == 200, response.content
        return Scrape(response.content.decode())

    return get


@pytest.fixture
def tick(monkeypatch, django_capture_on_commit_callbacks):
    """Run a tick and its after-commit work (the metrics), without asking the broker for a drain."""
    monkeypatch.setattr(tick_module, "request_dispatch", lambda: None)

    def run():
        with django_capture_on_commit_callbacks(execute=True):
            return run_tick()

    return run
