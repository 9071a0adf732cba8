"""Every page runs the same number of SQL queries with 5 users' work as with 50 (and a job's
page the same with 3 tasks as with 300): nothing is fetched per row."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.jobs.feasibility import forget_feasibility_cache
from scheduler.observability import health
from scheduler.board.read import forget as forget_board, newest_explained_tick
from tests.personas import submit
from tests.web.conftest import build_cluster

pytestmark = pytest.mark.django_db

PAGES = [
    "/queue/",
    "/queue/?band=interactive",
    "/queue/?band=batch&user=user001",
    "/queue/?job=waiting",
    "/jobs/",
    "/jobs/?user=user001&state=pending",
    "/jobs/user001/waiting/",
    "/jobs/user000/batchy/",
    "/budgets/",
    "/budgets/user001/",
    "/budgets/user001/?window=24h",
    "/preemptions/",
    "/preemptions/?band=batch&since=24h",
    "/workers/",
    "/scheduler/",
    "/manage/",
    "/manage/?user=user001",
    "/manage/tiers/",
    "/manage/uplifts/",
    "/manage/audit/",
    "/jobs/new/",
    "/what-if/",
    "/what-if/?name=probe&replicas=2&cpu=1&memory=1Gi&device_type=cpu",
]


def count_queries(client, url: str, htmx: bool = False) -> tuple[int, list[str]]:
    forget_board()  # a cold queue index and what-if basis cost more queries; measure cold every time
    forget_feasibility_cache()  # and so does the first read of the workers after a tick
    # Readiness (on /scheduler/) checks the migrations once per process: measure every page
    # with that check done, whichever test of the session ran it first.
    health.check_migrations()
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return len(captured), [q["sql"] for q in captured.captured_queries]


def test_page_queries_do_not_grow_with_users_jobs_workers_or_events(clients, ada):
    client = clients["ada"]
    build_cluster(5, ada)
    small = {url: count_queries(client, url) for url in PAGES}
    small_fragments = {url: count_queries(client, url, htmx=True) for url in PAGES}
    build_cluster(45, ada, start=5)
    for url in PAGES:
        n_small, sql_small = small[url]
        n_large, sql_large = count_queries(client, url)
        assert n_small == n_large, (url, n_small, n_large, sql_large[len(sql_small) :] or sql_large)
        assert small_fragments[url][0] == count_queries(client, url, htmx=True)[0], url


def test_job_page_queries_do_not_grow_with_its_tasks(clients, alice):
    client = clients["alice"]
    from scheduler.tick.run import run_tick

    submit(alice, "few", replicas=3, cpu=1000)
    submit(alice, "many", replicas=300, cpu=1000)
    run_tick()
    few, _ = count_queries(client, "/jobs/alice/few/")
    many, _ = count_queries(client, "/jobs/alice/many/")
    assert few == many
    assert count_queries(client, "/jobs/alice/many/?page=3")[0] == many


def test_queue_window_is_cut_without_reading_every_row(clients, alice):
    """50,000 pending tasks: a page of the queue reads one window of rows, in a fixed number of
    queries, and a poll that finds no newer tick answers 204 after one query."""
    from scheduler.tick.run import run_tick

    submit(alice, "huge", replicas=10_000, cpu=1)
    run_tick()
    client = clients["alice"]
    n, sql = count_queries(client, "/queue/?band=interactive&page=40")
    assert n <= 12, sql
    response = client.get("/queue/?band=interactive&page=40")
    assert '/alice/huge</a><span class="muted">/1950' in response.content.decode()
    tick = newest_explained_tick()
    with CaptureQueriesContext(connection) as captured:
        poll = client.get(f"/queue/?band=interactive&page=40&since={tick}", HTTP_HX_REQUEST="true")
    assert poll.status_code == 204
    assert len(captured) <= 4  # session, user, groups, newest tick
