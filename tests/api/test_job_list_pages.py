"""``GET jobs/`` by keyset pages: the cursor links, old ``?page=N`` links, and no OFFSET on a deep page."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.jobs import listing
from scheduler.models import Job
from tests.api.conftest import error_of
from tests.jobs.test_listing_pages import many_jobs  # noqa: F401 (a fixture)


def test_a_deep_page_is_read_from_its_row_without_offset(as_alice, many_jobs):
    page = as_alice.get("/api/v1/jobs/?page_size=3&sort=user").json()
    for _ in range(5):
        page = as_alice.get(page["next"]).json()
    with CaptureQueriesContext(connection) as queries:
        deep = as_alice.get(page["next"])
    assert deep.status_code == 200
    selects = [
        q["sql"]
        for q in queries.captured_queries
        if 'FROM "scheduler_job"' in q["sql"] and "LIMIT" in q["sql"] and not q["sql"].startswith("SELECT COUNT(*)")
    ]
    assert len(selects) == 1, selects
    assert not re.search(r"\bOFFSET\b", selects[0]), selects[0]
    # Read from the page's row on: the column's bound, and on PostgreSQL one row-value comparison
    # that the (user, id) index reads as a range (SQLite spells it out as ORs).
    assert re.search(r'"scheduler_job"\."user" >= \'\w+\'', selects[0]), selects[0]
    if connection.vendor == "postgresql":
        assert '("scheduler_job"."user", "scheduler_job"."id") >' in selects[0], selects[0]
    every = []
    page = as_alice.get("/api/v1/jobs/?page_size=3&sort=user").json()
    while True:
        every += [j["id"] for j in page["results"]]
        if not page["next"]:
            break
        page = as_alice.get(page["next"]).json()
    assert every == list(Job.objects.order_by("user", "pk").values_list("name", flat=True))


def test_an_old_page_number_link_still_answers_and_links_by_cursor(as_alice, many_jobs):
    page = as_alice.get("/api/v1/jobs/?page_size=5&page=2&sort=name").json()
    names = list(Job.objects.order_by("name").values_list("name", flat=True))
    assert [j["id"] for j in page["results"]] == names[5:10]
    assert page["count"] == 23
    assert "cursor=" in page["next"] and "page=" not in page["next"]
    assert [j["id"] for j in as_alice.get(page["next"]).json()["results"]] == names[10:15]
    assert [j["id"] for j in as_alice.get(page["previous"]).json()["results"]] == names[0:5]


def test_a_page_number_past_the_offset_limit_says_to_follow_the_cursors(as_alice, many_jobs, monkeypatch):
    monkeypatch.setattr(listing, "MAX_OFFSET", 10)
    response = as_alice.get("/api/v1/jobs/?page_size=5&page=4")
    assert response.status_code == 404
    assert "next links (cursors)" in error_of(response)["message"]
    assert as_alice.get("/api/v1/jobs/?page_size=5&page=9").status_code == 404


@pytest.mark.parametrize("cursor", ["nonsense", "eyJzIjoiLXN1Ym1pdHRlZCJ9:forged"])
def test_a_cursor_this_server_did_not_make_is_invalid_argument(as_alice, many_jobs, cursor):
    response = as_alice.get("/api/v1/jobs/", {"cursor": cursor})
    assert response.status_code == 400
    assert error_of(response)["details"]["field"] == "cursor"


def test_a_cursor_of_another_sort_is_refused(as_alice, many_jobs):
    page = as_alice.get("/api/v1/jobs/?page_size=5&sort=name").json()
    cursor = re.search(r"cursor=([^&]+)", page["next"]).group(1)
    response = as_alice.get(f"/api/v1/jobs/?sort=user&cursor={cursor}")
    assert response.status_code == 400
    assert error_of(response)["details"]["field"] == "cursor"


def test_the_count_is_exact_up_to_the_limit_then_says_more(as_alice, many_jobs, monkeypatch):
    total = Job.objects.count()
    exact = as_alice.get("/api/v1/jobs/?page_size=5").json()
    assert (exact["count"], exact["count_exact"]) == (total, True)
    monkeypatch.setattr(listing, "COUNT_LIMIT", total)  # exactly the limit: still exact
    assert as_alice.get("/api/v1/jobs/?page_size=5").json()["count_exact"] is True
    monkeypatch.setattr(listing, "COUNT_LIMIT", total - 1)
    capped = as_alice.get("/api/v1/jobs/?page_size=5").json()
    assert (capped["count"], capped["count_exact"]) == (total - 1, False)
    # A narrower filter under the limit is counted exactly again.
    user = Job.objects.values_list("user", flat=True).first()
    mine = Job.objects.filter(user=user).count()
    assert mine < total - 1
    narrow = as_alice.get(f"/api/v1/jobs/?page_size=5&user={user}").json()
    assert (narrow["count"], narrow["count_exact"]) == (mine, True)
