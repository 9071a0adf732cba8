"""The console's jobs table: filters, sort and grouping in the URL, a bad value's message, a
fixed number of queries per page, and bulk cancel with its confirmation."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.models import Job, Task, UserBudget
from tests.personas import NOW_MS, make_job, make_worker, run_tasks

pytestmark = pytest.mark.django_db


def names_on(response) -> list[str]:
    return re.findall(r'<td><a href="/jobs/[^"]+/">(/[^<]+)</a></td>', response.content.decode())


def test_the_table_filters_sorts_and_groups_from_the_url(clients):
    for i, user in enumerate(["alice", "bob", "alice", "bob"]):
        make_job(f"/{user}/run-{i}", band=Band.BATCH if i % 2 else Band.INTERACTIVE, submitted_at_ms=NOW_MS + i)
    make_job("/alice/other", submitted_at_ms=NOW_MS + 9)
    response = clients["bob"].get("/jobs/?name=run&sort=name&group=user")
    assert response.status_code == 200
    assert names_on(response) == ["/alice/run-0", "/alice/run-2", "/bob/run-1", "/bob/run-3"]
    html = response.content.decode()
    assert "alice: 2" in html and "bob: 2" in html
    # The header links keep the filter and flip the sort: shareable URLs.
    assert 'href="/jobs/?name=run&amp;sort=-name&amp;group=user"' in html


def test_the_effective_band_column_shows_the_downgrade(clients, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=1, max_band=Band.INTERACTIVE)
    run_tasks(make_job("/alice/big"), make_worker())
    make_job("/alice/waiting")
    Job.objects.filter(pk=make_job("/alice/done").pk).update(state="succeeded")
    response = clients["alice"].get("/jobs/?effective=batch&sort=name")
    assert names_on(response) == ["/alice/big", "/alice/waiting"]  # a finished job keeps its band
    assert response.content.decode().count('class="badge badge-downgrade"') == 2


@pytest.mark.parametrize(
    "query, field", [("band=urgent", "band"), ("sort=colour", "sort"), ("submitted_after=soon", "submitted_after")]
)
def test_a_bad_filter_value_gets_a_clear_message_not_a_500(clients, query, field):
    response = clients["alice"].get(f"/jobs/?{query}")
    assert response.status_code == 400
    assert re.search(rf'id="filter-error">{field}: ', response.content.decode())


def many_jobs(n: int) -> None:
    Job.objects.bulk_create(
        Job(
            name=f"/u{i % 7}/j{i}",
            user=f"u{i % 7}",
            band=i % 4,
            depth=0,
            submitted_at_ms=NOW_MS + i,
            root_submitted_at_ms=NOW_MS + i,
            state="pending",
            route="workers" if i % 2 else "",
        )
        for i in range(n)
    )
    Task.objects.bulk_create(Task(job_id=pk, index=0) for pk in Job.objects.values_list("pk", flat=True))


def test_the_pager_follows_cursors_through_every_job_and_old_page_links_still_answer(clients):
    many_jobs(120)
    expected = list(Job.objects.order_by("user", "-submitted_at_ms", "-pk").values_list("name", flat=True))
    seen, url = [], "/jobs/?sort=-submitted&group=user"
    while url:
        response = clients["ada"].get(url)
        assert response.status_code == 200
        seen += names_on(response)
        found = re.search(r'<a href="(\?[^"]*cursor=[^"]+)" hx-get="[^"]+"[^>]*>Next', response.content.decode())
        url = "/jobs/" + found.group(1).replace("&amp;", "&") if found else None
    assert seen == expected
    old = clients["ada"].get("/jobs/?sort=-submitted&group=user&page=2")
    assert names_on(old) == expected[50:100]
    assert "51–100 of 120" in old.content.decode()
    sorted_again = clients["ada"].get("/jobs/?sort=-submitted&group=user&page=2")
    assert "cursor" not in re.search(r'<th aria-sort[^>]*><a href="([^"]+)"', sorted_again.content.decode()).group(1)


def test_past_the_count_limit_the_pager_says_more_than(clients, monkeypatch):
    from scheduler.jobs import listing

    many_jobs(120)
    assert "1–50 of 120" in clients["ada"].get("/jobs/?page=1").content.decode()
    monkeypatch.setattr(listing, "COUNT_LIMIT", 100)
    page = clients["ada"].get("/jobs/?page=2").content.decode()
    assert "51–100 of more than 100" in page
    assert "of more than" not in clients["ada"].get("/jobs/?user=u0").content.decode()


def test_a_forged_cursor_gets_a_clear_message_not_a_500(clients):
    many_jobs(3)
    response = clients["alice"].get("/jobs/?cursor=forged")
    assert response.status_code == 400
    assert re.search(r'id="filter-error">cursor: ', response.content.decode())


@pytest.mark.parametrize(
    "url",
    [
        "/jobs/",
        "/jobs/?state=pending&sort=-tasks&group=band",
        "/jobs/?band=batch&name=j&group=user&page=2",
        "/jobs/?sort=user&cursor={cursor}",
    ],
)
def test_a_page_runs_the_same_queries_at_10_and_1000_jobs(clients, url):
    counts = []
    for n in (10, 1000):
        Job.objects.all().delete()
        many_jobs(n)
        first = clients["ada"].get("/jobs/?sort=user").content.decode()
        cursor = re.search(r"cursor=([^&\"]+)", first)
        with CaptureQueriesContext(connection) as captured:
            assert clients["ada"].get(url.format(cursor=cursor.group(1) if cursor else "")).status_code == 200
        counts.append(len(captured))
    assert counts[0] == counts[1], counts


# --- bulk cancel -----------------------------------------------------------------------------------


def test_bulk_cancel_confirms_with_the_counts_then_cancels(clients):
    for i in range(3):
        make_job(f"/alice/sweep-{i}", replicas=2)
    form = {"scope": "filter", "user": "alice", "name": "sweep", "back": "?user=alice"}
    confirm = clients["alice"].post("/jobs:cancel", form)
    assert confirm.status_code == 200
    assert re.search(r"This cancels <strong>3 jobs</strong>.*<strong>6 tasks</strong>", confirm.content.decode())
    assert not Job.objects.filter(state="killed").exists()  # nothing until confirmed

    done = clients["alice"].post("/jobs:cancel", {**form, "confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == "/jobs/?user=alice"
    assert Job.objects.filter(state="killed").count() == 3


def test_a_researcher_may_not_bulk_cancel_someone_elses_jobs(clients):
    make_job("/alice/mine")
    make_job("/bob/theirs")
    by_ids = clients["alice"].post(
        "/jobs:cancel", {"ids": ["/alice/mine", "/bob/theirs"], "confirm": "yes"}, follow=True
    )
    assert "belong(s) to other users" in by_ids.content.decode()
    by_filter = clients["alice"].post(
        "/jobs:cancel", {"scope": "filter", "state": "pending", "confirm": "yes"}, follow=True
    )
    assert "researchers may cancel only their own jobs" in by_filter.content.decode()
    assert not Job.objects.filter(state="killed").exists()  # all or nothing


def test_an_admin_bulk_cancels_anyones_jobs(clients):
    make_job("/alice/a")
    make_job("/bob/b")
    clients["ada"].post("/jobs:cancel", {"scope": "filter", "state": "pending", "confirm": "yes"})
    assert set(Job.objects.values_list("state", flat=True)) == {"killed"}


# --- inline logs -----------------------------------------------------------------------------------


@pytest.fixture
def logged(settings, tmp_path):
    settings.TASK_LOG_DIR = tmp_path / "logs"
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    job = make_job("/alice/train")
    run_tasks(job, make_worker())
    task = job.tasks.get()
    path = settings.TASK_LOG_DIR / str(task.pk) / "1.log"
    path.parent.mkdir(parents=True)
    path.write_text("epoch 1\n")
    return task, path


def test_a_running_attempts_log_follows_and_stops_when_it_ends(clients, logged):
    task, path = logged
    url = f"/logs/{task.pk}/1/"
    first = clients["alice"].get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "epoch 1" in first and 'hx-trigger="every 2s"' in first
    path.write_text("epoch 1\nepoch 2\n")
    assert "epoch 2" in clients["alice"].get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in clients["alice"].get(url + "?follow=0", HTTP_HX_REQUEST="true").content.decode()

    task.attempts.update(state="succeeded", finished_at=timezone.now())
    ended = clients["alice"].get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in ended and "The attempt has ended." in ended


def test_only_the_owner_operators_and_admins_read_a_log(clients, logged):
    task, _ = logged
    assert clients["bob"].get(f"/logs/{task.pk}/1/").status_code == 403
    assert clients["olivia"].get(f"/logs/{task.pk}/1/").status_code == 200
    assert clients["alice"].get(f"/logs/{task.pk}/9/").status_code == 404


def test_the_job_page_links_each_attempt_to_its_inline_log(clients, logged):
    task, _ = logged
    html = clients["alice"].get("/jobs/alice/train/").content.decode()
    assert f'hx-get="/logs/{task.pk}/1/" hx-target="#log"' in html and 'id="log"' in html


def test_cancel_all_matching_counts_only_the_jobs_it_would_cancel(clients):
    """It read "Cancel all 55 matching" with finished jobs among the 55."""
    for i in range(3):
        make_job(f"/alice/live{i}")
    for i in range(2):
        Job.objects.filter(pk=make_job(f"/alice/done{i}").pk).update(state="succeeded")
    page = clients["alice"].get("/jobs/?user=alice").content.decode()
    assert "Cancel all 3 unfinished matching" in page and "Cancel all 5" not in page
    Job.objects.filter(user="alice").update(state="succeeded")
    page = clients["alice"].get("/jobs/?user=alice").content.decode()
    assert "No unfinished job matches." in page and "Cancel all" not in page
