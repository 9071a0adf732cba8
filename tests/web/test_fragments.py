"""HTMX: fragments come from the same templates as the pages, polling is cheap and stops when
there is nothing left to watch, and every hx-get also has an href."""

from __future__ import annotations

import re

import pytest

from scheduler.jobs.cancel import cancel_job
from scheduler.board.read import newest_explained_tick
from scheduler.tick.run import run_tick
from tests.personas import make_worker, run_tasks, submit
from tests.web.conftest import preempt

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FRAGMENTS = {
    "/queue/": 'id="queue"',
    "/jobs/": 'id="jobs"',
    "/jobs/alice/train/": 'id="live"',
    "/budgets/": 'id="budgets"',
    "/budgets/alice/": 'id="live"',
    "/preemptions/": 'id="history"',
    "/workers/": 'id="workers"',
    "/scheduler/": 'id="state"',
    "/what-if/": 'id="what-if"',
    "/manage/": 'id="manage-budgets"',
    "/manage/uplifts/": 'id="uplifts"',
    "/manage/tiers/": 'id="tiers"',
    "/manage/audit/": 'id="audit"',
}


@pytest.fixture
def world(alice, ada):
    make_worker("w1", cpu=2, memory_gib=8)
    submit(alice, "train", replicas=2, cpu=4)
    run_tick()


@pytest.mark.parametrize("url", FRAGMENTS)
def test_htmx_request_gets_only_the_partial_of_the_same_template(url, clients, world):
    page = clients["ada"].get(url).content.decode()
    fragment = clients["ada"].get(url, **HTMX).content.decode()
    assert "<html" in page and FRAGMENTS[url] in page
    assert "<html" not in fragment and "<nav" not in fragment.split(FRAGMENTS[url])[0]
    assert fragment.lstrip().startswith("<") and FRAGMENTS[url] in fragment.split(">", 1)[0]
    # The fragment is the page's own markup, not a second template (CSRF tokens are masked anew
    # on every render).
    same = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')
    assert same.sub("csrf", fragment.strip()) in same.sub("csrf", page)


@pytest.mark.parametrize("url", [u for u in FRAGMENTS if not u.startswith("/manage/")])
def test_every_hx_get_has_an_href_or_is_a_form_with_an_action(url, clients, world):
    html = clients["ada"].get(url).content.decode()
    for tag in re.findall(r"<(?:a|form)\b[^>]*\bhx-get=[^>]*>", html):
        if tag.startswith("<a"):
            assert "href=" in tag, tag
        else:
            assert "action=" in tag and 'method="get"' in tag, tag
    # Polling sections are not links: they refresh what the full page already shows.
    assert "hx-post" not in html


def test_every_post_form_carries_a_csrf_token(clients, world, alice):
    from scheduler.models import UpliftGrant

    UpliftGrant.objects.create(user_id="alice", requested_by=alice, budget_limit=5, reason="x", duration_seconds=60)
    for url in [
        "/jobs/new/",
        "/jobs/alice/train/",
        "/budgets/alice/",
        "/workers/",
        "/scheduler/",
        "/manage/",
        "/manage/uplifts/",
        "/settings/notifications/",
    ]:
        html = clients["ada"].get(url).content.decode()
        forms = re.findall(r'<form[^>]*method="post"[^>]*>(.*?)</form>', html, re.S)
        assert forms, url
        for body in forms:
            assert 'name="csrfmiddlewaretoken"' in body, url


def test_job_page_polls_until_the_job_finishes_then_renders_without_its_trigger(clients, world, alice):
    live = clients["alice"].get("/jobs/alice/train/", **HTMX).content.decode()
    assert 'hx-trigger="every 5s"' in live
    cancel_job(alice, "/alice/train")
    done = clients["alice"].get("/jobs/alice/train/", **HTMX).content.decode()
    assert "hx-trigger" not in done and "hx-get" not in done
    assert 'data-finished="true"' in done
    assert "This page stopped refreshing: the job has finished." in done


def test_queue_poll_answers_204_until_a_newer_tick(clients, world):
    client = clients["alice"]
    tick = newest_explained_tick()
    assert client.get(f"/queue/?since={tick}", **HTMX).status_code == 204
    # Without HTMX (a bookmarked URL) the page renders as usual.
    assert client.get(f"/queue/?since={tick}").status_code == 200
    run_tick()
    fresh = client.get(f"/queue/?since={tick}", **HTMX)
    assert fresh.status_code == 200
    newer = newest_explained_tick()
    assert f"since={newer}" in fresh.content.decode()


def test_preemption_poll_answers_204_until_a_new_event(clients, world, alice, bob):
    client = clients["alice"]
    assert client.get("/preemptions/?since=None", **HTMX).status_code == 200
    w2 = make_worker("w2")
    victim_job = submit(bob, "crunch", priority="batch")
    run_tasks(victim_job, w2)
    preemptor = submit(alice, "urgent")
    event = preempt(victim_job.tasks.get(), preemptor.tasks.get(), w2)
    assert client.get(f"/preemptions/?since={event.pk}", **HTMX).status_code == 204
    assert client.get(f"/preemptions/?since={event.pk - 1}", **HTMX).status_code == 200


def test_pollers_keep_their_filters_and_page(clients, world):
    html = clients["alice"].get("/queue/?band=batch&user=alice&page=1", **HTMX).content.decode()
    trigger = re.search(r'<section id="queue" hx-get="([^"]+)"', html).group(1)
    assert "band=batch" in trigger and "user=alice" in trigger and "since=" in trigger


def test_jobs_table_rows_poll_answer_204_until_a_newer_tick_then_show_the_new_state(clients, world, alice):
    """Issue 23: the jobs table refreshes like the queue (its rows, not the filter form)."""
    client = clients["alice"]
    page = client.get("/jobs/?user=alice").content.decode()
    poller = re.search(r'<div id="jobs-rows" hx-get="([^"]+)" hx-trigger="every 5s" hx-target="this"', page)
    assert poller is not None and "user=alice" in poller.group(1)
    tick = newest_explained_tick()
    assert f"since={tick}" in poller.group(1)
    rows = {"HTTP_HX_TARGET": "jobs-rows", **HTMX}
    assert client.get(f"/jobs/?user=alice&since={tick}", **rows).status_code == 204
    # A filter or page change (another target) is answered whatever the marker says.
    assert client.get(f"/jobs/?user=alice&since={tick}", **HTMX).status_code == 200

    cancel_job(alice, "/alice/train")
    run_tick()
    fresh = client.get(f"/jobs/?user=alice&since={tick}", **rows)
    html = fresh.content.decode()
    assert fresh.status_code == 200 and html.lstrip().startswith('<div id="jobs-rows"')
    assert '<form class="filters"' not in html  # the form someone may be typing in stays as it is
    assert f"since={newest_explained_tick()}" in html and "state state-killed" in html


def test_jobs_table_checkboxes_survive_a_refresh(clients, world):
    html = clients["alice"].get("/jobs/").content.decode()
    boxes = re.findall(r'<input type="checkbox" name="ids"[^>]*>', html)
    assert boxes and all('hx-preserve="true"' in b and 'id="pick-' in b for b in boxes)


def test_jobs_table_offers_a_box_to_cancel_only_live_jobs_of_ones_own(clients, world, alice):
    submit(alice, "done")
    cancel_job(alice, "/alice/done")
    html = clients["alice"].get("/jobs/").content.decode()
    picked = re.findall(r'<input type="checkbox" name="ids" value="([^"]+)"', html)
    assert picked == ["/alice/train"]  # not the killed /alice/done


def test_fairness_poll_answers_204_until_a_newer_tick(clients, world):
    client = clients["alice"]
    page = client.get("/fairness/").content.decode()
    tick = newest_explained_tick()
    assert re.search(rf'<section id="fairness" hx-get="/fairness/\?since={tick}" hx-trigger="every 5s"', page)
    assert client.get(f"/fairness/?since={tick}", **HTMX).status_code == 204
    run_tick()
    fresh = client.get(f"/fairness/?since={tick}", **HTMX)
    html = fresh.content.decode()
    assert fresh.status_code == 200 and f"since={newest_explained_tick()}" in html
    # The page's own section (its times differ by the moment of rendering, so not compared whole).
    assert html.lstrip().startswith('<section id="fairness"') and "<html" not in html
