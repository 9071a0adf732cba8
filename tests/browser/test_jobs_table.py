"""The jobs table and inline logs in a real browser: a filtered, sorted, grouped view built with
the controls is shared by its URL and shows the same rows to a colleague; a running attempt's
log follows as it grows and stops following when the attempt ends."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.models import Attempt
from tests.browser.conftest import save_screenshot, sign_in
from tests.personas import NOW_MS, make_job, make_worker, run_tasks

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-jobs-table-123"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def people(db):
    return {name: get_user_model().objects.create_user(name, password=PASSWORD) for name in ("alice", "bob")}


def signed_in(open_page, live_server, name):
    page = open_page()
    sign_in(page, live_server, name, PASSWORD)
    return page


def rows(page) -> list[str]:
    return page.locator("#jobs-table tbody tr:not(.group-head) td:nth-child(2) a").all_inner_texts()


def test_a_filtered_sorted_grouped_view_is_shared_by_its_url(live_server, open_page, people):
    for i, user in enumerate(["alice", "bob", "alice", "bob", "alice"]):
        make_job(f"/{user}/sweep-{i}", band=Band.BATCH if i % 2 else Band.INTERACTIVE, submitted_at_ms=NOW_MS + i)
    make_job("/alice/eval", submitted_at_ms=NOW_MS + 10)
    alice = signed_in(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/jobs/")
    alice.fill("input[name=name]", "sweep")
    alice.select_option("select[name=group]", "user")
    alice.click("form.filters button[type=submit]")
    alice.wait_for_url(re.compile(r"name=sweep"))
    alice.click("th a[data-sort=name]")
    alice.wait_for_url(re.compile(r"sort=name"))
    alice.wait_for_function("document.querySelector('th[aria-sort=ascending] a[data-sort=name]') !== null")
    expected = ["/alice/sweep-0", "/alice/sweep-2", "/alice/sweep-4", "/bob/sweep-1", "/bob/sweep-3"]
    assert rows(alice) == expected
    shared = alice.url
    save_screenshot(alice, "jobs-table-grouped")

    bob = signed_in(open_page, live_server, "bob")
    bob.goto(shared)
    assert rows(bob) == expected
    assert [t.strip() for t in bob.locator("tr.group-head").all_text_contents()] == ["alice (3 jobs)", "bob (2 jobs)"]
    assert bob.input_value("input[name=name]") == "sweep"


def running_attempt_log(settings, tmp_path, monkeypatch):
    """alice's /alice/train running on w1, its log (the server's own file, still empty) polled
    every second: the rule, not the period, is under test. Returns the task and the log's path."""
    monkeypatch.setattr("scheduler.views.jobs.LOG_POLL_SECONDS", 1)
    settings.TASK_LOG_DIR = tmp_path / "logs"
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    job = make_job("/alice/train")
    run_tasks(job, make_worker())
    task = job.tasks.get()
    log = settings.TASK_LOG_DIR / str(task.pk) / "1.log"
    log.parent.mkdir(parents=True)
    return task, log


def test_a_running_attempts_log_follows_and_stops_when_it_ends(
    live_server, open_page, people, settings, tmp_path, monkeypatch
):
    task, log = running_attempt_log(settings, tmp_path, monkeypatch)
    log.write_text("epoch 1\n")
    alice = signed_in(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/jobs/alice/train/")
    alice.click("a[data-log='0.1']")
    alice.wait_for_selector("#log[data-following=yes] #log-text:has-text('epoch 1')")

    log.write_text("epoch 1\nepoch 2\n")
    alice.wait_for_selector("#log-text:has-text('epoch 2')", timeout=8_000)
    Attempt.objects.filter(task=task).update(state="succeeded", finished_at=timezone.now())
    alice.wait_for_selector("#log[data-following=no]", timeout=8_000)
    assert "The attempt has ended." in alice.inner_text("#log")
    save_screenshot(alice, "job-log-followed")


def test_a_followed_log_keeps_to_its_end_unless_the_reader_scrolled_up(
    live_server, open_page, people, settings, tmp_path, monkeypatch
):
    _, log = running_attempt_log(settings, tmp_path, monkeypatch)
    lines = [f"step {i}\n" for i in range(300)]
    log.write_text("".join(lines))
    alice = signed_in(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/jobs/alice/train/")
    alice.click("a[data-log='0.1']")
    alice.wait_for_selector("#log[data-following=yes] #log-text:has-text('step 299')")
    from_end = "(() => { const p = document.getElementById('log-text'); return p.scrollHeight - p.scrollTop - p.clientHeight; })()"
    assert alice.evaluate(
        "document.getElementById('log-text').scrollHeight > 2 * document.getElementById('log-text').clientHeight"
    )
    assert alice.evaluate(from_end) < 8  # opened at its end

    log.write_text("".join(lines) + "step 300\n")
    alice.wait_for_selector("#log-text:has-text('step 300')", timeout=8_000)
    assert alice.evaluate(from_end) < 8  # and kept there as it grows

    alice.evaluate("document.getElementById('log-text').scrollTop = 0")
    log.write_text("".join(lines) + "step 300\nstep 301\n")
    alice.wait_for_selector("#log-text:has-text('step 301')", timeout=8_000)
    assert alice.evaluate("document.getElementById('log-text').scrollTop") == 0  # the reader's place kept


def test_the_jobs_table_refreshes_at_the_next_tick_and_keeps_a_ticked_box(live_server, open_page, people):
    """Issue 23: the table was still at tick 267 after 15 s. It polls like the queue: a new tick
    brings the new states in without a reload, and a box ticked for bulk cancel stays ticked."""
    from scheduler.jobs.cancel import cancel_job
    from scheduler.tick.run import run_tick

    make_job("/alice/one", submitted_at_ms=NOW_MS)
    make_job("/alice/two", submitted_at_ms=NOW_MS + 1)
    run_tick()
    alice = signed_in(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/jobs/?user=alice&sort=name")
    alice.check("input[name=ids][value='/alice/one']")
    alice.fill("form.filters input[name=name]", "typing")  # not submitted yet
    assert alice.locator("#jobs-table .state-killed").count() == 0

    cancel_job(people["alice"], "/alice/two")
    run_tick()
    alice.wait_for_selector("#jobs-table .state-killed", timeout=15_000)
    assert alice.locator("input[name=ids][value='/alice/one']").is_checked()
    # The filter form was left alone: what is typed in it is still there.
    assert alice.locator("form.filters input[name=name]").input_value() == "typing"
