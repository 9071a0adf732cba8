"""deploy/: the Grafana dashboard and the Prometheus rules parse and name only metrics we expose."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from django.conf import settings

from scheduler.foundation.instruments import EVENTS
from scheduler.observability.metrics import DatabaseCollector

pytestmark = pytest.mark.django_db

DEPLOY = settings.BASE_DIR / "deploy"
METRIC = re.compile(r"\biris_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exposed_names() -> set[str]:
    names = set()
    for family in list(EVENTS.collect()) + list(DatabaseCollector().collect()):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "iris-scheduler.json").read_text())
    assert dashboard["panels"], "the dashboard has panels"
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def rule_exprs() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_the_alert_rules_cover_what_the_issue_asks_for():
    names = {
        rule["alert"]
        for group in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    assert {"IrisTickStalled", "IrisOutboxStuck", "IrisNoHealthyWorkers", "IrisUserPreemptedRepeatedly"} <= names


@pytest.mark.parametrize("source", [dashboard_exprs, rule_exprs], ids=["dashboard", "alerts"])
def test_every_metric_referenced_exists(source):
    known = exposed_names()
    referenced = {name for expr in source() for name in METRIC.findall(expr)}

    assert referenced, "expressions reference metrics"
    assert referenced <= known, f"unknown metrics: {sorted(referenced - known)}"


def test_the_scrape_example_parses():
    config = yaml.safe_load((DEPLOY / "prometheus" / "scrape.yml").read_text())
    assert config["scrape_configs"][0]["metrics_path"] == "/metrics"
