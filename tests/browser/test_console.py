"""The console in a real browser, as each role: a researcher submits a job and watches it queue
as BATCH because she is over budget, reads why, asks for an uplift; an admin approves it and
the downgrade badge disappears; a PRODUCTION job preempts BATCH work and the history shows it;
an operator runs a tick and drains a worker. Every page is saved as a screenshot.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from scheduler.core.bands import Band
from scheduler.jobs.submit import submit_job
from scheduler.models import Job, PreemptionEvent, UpliftGrant, UserBudget
from scheduler.foundation.roles import ensure_groups
from scheduler.tick.run import run_tick
from tests.browser.conftest import save_screenshot, sign_in
from tests.personas import make_worker, run_tasks

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-console-123"
# Polling fragments refresh every 5-10 s; allow a few periods.
LIVE = 25_000


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def people(db):
    admins, operators = ensure_groups()
    users = {}
    for name in ("alice", "bob", "olivia", "ada"):
        users[name] = get_user_model().objects.create_user(name, password=PASSWORD)
    users["olivia"].groups.add(operators)
    users["ada"].groups.add(admins)
    users["ada"].is_staff = True
    users["ada"].save()
    return users


@pytest.fixture
def cluster(people):
    """Two full 2-core workers: alice's INTERACTIVE warm-up (18 points, over her limit of 10) on
    w1 and bob's BATCH crunch on w2."""
    w1 = make_worker("w1", cpu=2, memory_gib=8, zone="a")
    w2 = make_worker("w2", cpu=2, memory_gib=8, zone="b")
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=int(Band.INTERACTIVE))
    warmup = submit_job(people["alice"], {"command": ["true"], "name": "warmup", "cpu": 2, "memory": "8Gi"})
    run_tasks(warmup, w1)
    crunch = submit_job(
        people["bob"], {"command": ["true"], "name": "crunch", "priority": "batch", "cpu": 2, "memory": "8Gi"}
    )
    run_tasks(crunch, w2)
    return {"w1": w1, "w2": w2}


def as_user(open_page, live_server, name: str):
    page = open_page()
    sign_in(page, live_server, name, PASSWORD)
    return page


def queue_row(page, task: str):
    return page.locator("#queue tr", has_text=task)


def test_downgrade_explained_uplift_approved_and_preemption_recorded(live_server, open_page, people, cluster):
    alice = as_user(open_page, live_server, "alice")
    save_screenshot(alice, "01-queue-before-any-tick")
    assert "appears after the first scheduling tick" in alice.inner_text("#queue")

    # She submits from the form (4 cores per task: no worker is big enough, so it keeps waiting).
    alice.goto(f"{live_server.url}/jobs/new/")
    alice.fill("#id_name", "train")
    alice.fill("#id_command", "python train.py")
    alice.fill("#id_replicas", "2")
    alice.fill("#id_cpu", "4")
    alice.fill("#id_memory", "1Gi")
    save_screenshot(alice, "02-submit-form")
    alice.click("#submit-form button[type=submit]")
    alice.wait_for_selector("h1:has-text('/alice/train')")
    assert "Submitted /alice/train as INTERACTIVE" in alice.inner_text(".messages")
    save_screenshot(alice, "03-job-before-tick")

    # She watches the queue; the tick puts her tasks in it without a reload, demoted to BATCH.
    alice.goto(f"{live_server.url}/queue/")
    run_tick()
    row = queue_row(alice, "/alice/train")
    row.first.wait_for(timeout=LIVE)
    assert "BATCH" in alice.inner_text("#band-batch")
    badge = row.first.locator(".badge-downgrade")
    assert badge.inner_text() == "downgraded: 8 pts over (18 > 10)"
    assert badge.get_attribute("title") == "INTERACTIVE runs as BATCH: spend 18 > limit 10"
    save_screenshot(alice, "04-queue-downgraded")

    # The job's why panel gives the numbers and what would change them.
    alice.goto(f"{live_server.url}/jobs/alice/train/")
    why = alice.inner_text(".change")
    assert "You are 8 points over your limit (spend 18 > limit 10)" in why
    assert "your INTERACTIVE work runs as BATCH until your running work drops to 10 points or less" in why
    assert alice.locator("#downgrade").is_visible()
    save_screenshot(alice, "05-job-why-downgraded")

    # Her budget page: red bar, and she asks for an uplift.
    alice.goto(f"{live_server.url}/budgets/")
    assert alice.locator("tr.mine .bar-red").count() == 1
    save_screenshot(alice, "06-budgets")
    alice.goto(f"{live_server.url}/budgets/alice/")
    alice.fill("#id_budget_limit", "100")
    alice.fill("#id_reason", "paper deadline on Friday")
    alice.click("#request button[type=submit]")
    alice.wait_for_selector(".message-success")
    assert "requested" in alice.inner_text("#live")
    save_screenshot(alice, "07-budget-uplift-requested")

    # The admin approves it for 48 hours.
    ada = as_user(open_page, live_server, "ada")
    ada.goto(f"{live_server.url}/manage/uplifts/")
    grant = UpliftGrant.objects.get(user_id="alice")
    save_screenshot(ada, "08-admin-uplift-requests")
    ada.fill(f"#id_g{grant.pk}-duration_hours", "48")
    ada.fill(f"#id_g{grant.pk}-note", "ok until the deadline")
    ada.click(f"#uplift-{grant.pk} button:has-text('Approve')")
    ada.wait_for_selector(".message-success:has-text('Approved uplift')")
    save_screenshot(ada, "09-admin-uplift-approved")

    # Next tick: her tasks queue as INTERACTIVE and the badge is gone, on the live page.
    alice.goto(f"{live_server.url}/queue/")
    assert alice.locator("#queue .badge-downgrade").count() == 2
    run_tick()
    alice.locator("#band-interactive").wait_for(timeout=LIVE)
    alice.wait_for_function("() => document.querySelectorAll('#queue .badge-downgrade').length === 0", timeout=LIVE)
    assert queue_row(alice, "/alice/train").first.locator(".band-interactive").count() == 1
    save_screenshot(alice, "10-queue-after-uplift")
    alice.goto(f"{live_server.url}/jobs/alice/train/")
    assert alice.locator("#downgrade").count() == 0
    assert "approved" in alice.goto(f"{live_server.url}/budgets/alice/").text()

    # A PRODUCTION job preempts bob's BATCH crunch; the history page shows it as it happens.
    alice.goto(f"{live_server.url}/preemptions/")
    assert "No preemptions yet" in alice.inner_text("#history")
    submit_job(
        people["ada"], {"command": ["true"], "name": "hero", "priority": "production", "cpu": 2, "memory": "8Gi"}
    )
    run_tick()
    alice.locator("#history tr", has_text="/bob/crunch").first.wait_for(timeout=LIVE)
    text = alice.inner_text("#history")
    assert "/ada/hero" in text and "PRODUCTION over BATCH" in text
    assert PreemptionEvent.objects.count() == 1
    save_screenshot(alice, "11-preemptions")

    # Bob's job page names who preempted him and when.
    bob = as_user(open_page, live_server, "bob")
    bob.goto(f"{live_server.url}/jobs/bob/crunch/")
    assert "/ada/hero/0" in bob.inner_text("#live")
    save_screenshot(bob, "12-job-preempted")

    # Alice cancels her job; the page stops polling once it has finished.
    alice.goto(f"{live_server.url}/jobs/alice/train/")
    assert alice.get_attribute("#live", "hx-trigger")
    alice.click("button:has-text('Cancel job')")
    alice.wait_for_selector(".message-success:has-text('Cancelled /alice/train')")
    assert alice.get_attribute("#live", "hx-trigger") is None
    assert "the job has finished (killed)" in alice.inner_text(".change")
    assert Job.objects.get(name="/alice/train").state == "killed"


def test_each_role_sees_what_it_may_do(live_server, open_page, people, cluster):
    run_tick()
    navs = {}
    for name in ("alice", "olivia", "ada"):
        page = as_user(open_page, live_server, name)
        navs[name] = page.inner_text("header.top nav")
        assert page.inner_text(".who .role") == {"alice": "RESEARCHER", "olivia": "OPERATOR", "ada": "ADMIN"}[name]
    assert "Scheduler" not in navs["alice"] and "Admin" not in navs["alice"]
    assert "Scheduler" in navs["olivia"] and "Admin" not in navs["olivia"]
    assert "Scheduler" in navs["ada"] and "Admin" in navs["ada"]


def test_researcher_is_told_why_a_page_is_closed_to_her(live_server, open_page, people):
    alice = as_user(open_page, live_server, "alice")
    response = alice.goto(f"{live_server.url}/scheduler/")
    assert response.status == 403
    assert "The scheduler state page is for operators (and admins). You are signed in as 'alice' (researcher)." in (
        alice.inner_text(".why")
    )
    save_screenshot(alice, "13-forbidden")


def test_researcher_submission_refused_with_the_rule_and_what_if_answers(live_server, open_page, people, cluster):
    run_tick()
    alice = as_user(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/jobs/new/")
    alice.fill("#id_name", "big")
    alice.fill("#id_command", "python train.py")
    alice.select_option("#id_priority", "production")
    alice.click("#submit-form button[type=submit]")
    alice.wait_for_selector(".field.invalid")
    assert "only admins may submit PRODUCTION jobs" in alice.inner_text("#submit-form")
    save_screenshot(alice, "14-submit-refused")

    alice.goto(f"{live_server.url}/what-if/")
    alice.fill("#id_name", "probe")
    alice.fill("#id_cpu", "1")
    alice.fill("#id_memory", "1Gi")
    alice.click("#what-if button[type=submit]")
    alice.wait_for_selector("#answer h2:has-text('Accepted as /alice/probe')")
    answer = alice.inner_text("#answer")
    assert "downgraded: 8 pts over (18 > 10)" in answer  # core.explain.Downgrade.badge
    assert re.search(r"Would wait|Would be placed", answer)
    save_screenshot(alice, "15-what-if")


def test_operator_runs_a_tick_and_drains_a_worker(live_server, open_page, people, cluster):
    olivia = as_user(open_page, live_server, "olivia")
    olivia.goto(f"{live_server.url}/scheduler/")
    olivia.click("button:has-text('Run a tick now')")
    olivia.wait_for_selector(".message-success:has-text('Tick')")
    save_screenshot(olivia, "16-scheduler-state")

    olivia.goto(f"{live_server.url}/workers/")
    olivia.locator("tr", has_text="w2").locator("button:has-text('Drain')").click()
    olivia.wait_for_selector(".message-success:has-text('w2 is draining')")
    assert olivia.locator("tr", has_text="w2").locator(".health").inner_text() == "draining"
    save_screenshot(olivia, "17-workers")


def test_admin_pages(live_server, open_page, people, cluster):
    run_tick()
    ada = as_user(open_page, live_server, "ada")
    ada.goto(f"{live_server.url}/manage/?user=alice")
    assert ada.input_value("#id_budget_limit") == "10"
    # The browser checks the sign; the service refuses what no column can hold, on the field.
    ada.fill("#id_budget_limit", str(2**63))
    ada.fill("#id_reason", "more room")
    ada.click("#budget-form button[type=submit]")
    ada.wait_for_selector(".field.invalid")
    assert "must be at most" in ada.inner_text("#budget-form")
    save_screenshot(ada, "18-admin-budget-invalid")
    ada.fill("#id_budget_limit", "5000")
    ada.click("#budget-form button[type=submit]")
    ada.wait_for_selector(".message-success:has-text('Budget of alice set')")
    save_screenshot(ada, "19-admin-budgets")
    ada.goto(f"{live_server.url}/manage/audit/")
    assert "budget.set" in ada.inner_text("#audit")
    save_screenshot(ada, "20-admin-audit")
    ada.goto(f"{live_server.url}/manage/tiers/")
    save_screenshot(ada, "21-admin-tiers")
    ada.goto(f"{live_server.url}/jobs/")
    save_screenshot(ada, "22-jobs")
    ada.click("button:has-text('Sign out')")
    ada.wait_for_selector("h1:has-text('Sign in to Iris')")
    save_screenshot(ada, "23-signed-out")
    ada.goto(f"{live_server.url}/queue/")
    assert "/accounts/login/" in ada.url


def test_budget_chart_draws_an_hour_of_tick_samples(live_server, open_page, people, cluster):
    """Spend rising over the limit and back, sampled every minute for an hour."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import TickRecord

    now = timezone.now()
    for minute in range(60):
        spend = 18 if minute > 40 else (minute * 3) % 25
        TickRecord.objects.create(
            started_at=now - timedelta(minutes=59 - minute, seconds=30),
            now_ms=0,
            duration_ms=3,
            spend={"alice": spend, "bob": 4},
            limits={"alice": 10 if minute < 50 else 20},
        )
    alice = as_user(open_page, live_server, "alice")
    alice.goto(f"{live_server.url}/budgets/alice/")
    chart = alice.locator("svg.chart")
    assert chart.locator("polyline.spend-line").count() == 1
    assert chart.locator("circle.over-dot").count() > 5
    assert "60 tick samples" in alice.inner_text("#live")
    save_screenshot(alice, "24-budget-chart")
    # The list's users with work are the newest tick's counts: a real tick, not just samples.
    from scheduler.tick.run import run_tick

    run_tick()
    alice.goto(f"{live_server.url}/budgets/")
    assert alice.locator("svg.spark").count() == 2
    save_screenshot(alice, "25-budgets-sparklines")
