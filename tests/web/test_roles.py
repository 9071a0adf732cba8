"""Who may open which page: a role matrix over every console page, and a 403 page that says why."""

from __future__ import annotations

import pytest

from scheduler.models import UpliftGrant, Worker
from tests.personas import make_worker, submit

pytestmark = pytest.mark.django_db

EVERYONE = {"anonymous": 302, "alice": 200, "bob": 200, "olivia": 200, "ada": 200}
OPERATORS = {"anonymous": 302, "alice": 403, "bob": 403, "olivia": 200, "ada": 200}
ADMINS = {"anonymous": 302, "alice": 403, "bob": 403, "olivia": 403, "ada": 200}

PAGES = {
    "/queue/": EVERYONE,
    "/queue/?band=batch&user=alice": EVERYONE,
    "/jobs/": EVERYONE,
    "/jobs/alice/train/": EVERYONE,
    "/jobs/new/": EVERYONE,
    "/what-if/": EVERYONE,
    "/budgets/": EVERYONE,
    "/budgets/alice/": EVERYONE,
    "/preemptions/": EVERYONE,
    "/workers/": EVERYONE,
    "/settings/notifications/": EVERYONE,
    "/scheduler/": OPERATORS,
    "/manage/": ADMINS,
    "/manage/tiers/": ADMINS,
    "/manage/uplifts/": ADMINS,
    "/manage/audit/": ADMINS,
}


@pytest.fixture
def world(alice, ada):
    make_worker("w1")
    submit(alice, "train")


@pytest.mark.parametrize("url", PAGES)
def test_every_page_answers_each_role_as_its_role_allows(url, clients, world):
    for persona, expected in PAGES[url].items():
        response = clients[persona].get(url)
        assert response.status_code == expected, (url, persona, response.status_code)
        if expected == 302:
            assert response["Location"].startswith("/accounts/login/?next=")


def test_home_sends_everyone_to_the_queue(clients):
    response = clients["alice"].get("/")
    assert response.status_code == 302 and response["Location"] == "/queue/"


def test_forbidden_page_says_who_may_open_it_and_who_you_are(clients):
    response = clients["alice"].get("/scheduler/")
    assert response.status_code == 403
    text = response.content.decode()
    assert "The scheduler state page is for operators (and admins)." in text
    assert "You are signed in as &#x27;alice&#x27; (researcher)." in text
    admin_page = clients["olivia"].get("/manage/").content.decode()
    assert "The admin console is for admins. You are signed in as &#x27;olivia&#x27; (operator)." in admin_page


def test_the_nav_shows_what_the_role_may_do(clients):
    alice = clients["alice"].get("/queue/").content.decode()
    olivia = clients["olivia"].get("/queue/").content.decode()
    ada = clients["ada"].get("/queue/").content.decode()
    assert 'href="/scheduler/"' not in alice and 'href="/manage/"' not in alice
    assert 'href="/scheduler/"' in olivia and 'href="/manage/"' not in olivia
    assert 'href="/scheduler/"' in ada and 'href="/manage/"' in ada
    assert "researcher: submit INTERACTIVE and BATCH jobs" in alice


def test_unknown_job_is_a_404_page_that_names_it(clients):
    response = clients["alice"].get("/jobs/alice/nope/")
    assert response.status_code == 404
    assert "There is no job /alice/nope." in response.content.decode()


def test_researchers_may_not_run_ticks_drain_workers_or_decide_uplifts(clients, alice, ada):
    make_worker("w1")
    grant = UpliftGrant.objects.create(
        user_id="alice", requested_by=alice, budget_limit=10, reason="x", duration_seconds=3600
    )
    assert clients["alice"].post("/scheduler/tick").status_code == 403
    assert clients["alice"].post("/workers/w1:drain").status_code == 403
    assert clients["olivia"].post(f"/manage/uplifts/{grant.pk}:approve", {}).status_code == 403
    assert not Worker.objects.get(name="w1").draining
    grant.refresh_from_db()
    assert grant.state == UpliftGrant.State.REQUESTED


def test_actions_need_post(clients):
    make_worker("w1")
    assert clients["olivia"].get("/workers/w1:drain").status_code == 405
    assert clients["olivia"].get("/scheduler/tick").status_code == 405


def test_unknown_budget_user_is_a_404_but_your_own_page_always_opens(clients):
    assert clients["alice"].get("/budgets/nobody/").status_code == 404
    assert "No user, budget, grant or job is named" in clients["alice"].get("/budgets/nobody/").content.decode()
    assert clients["alice"].get("/budgets/alice/").status_code == 200
    assert clients["alice"].get("/budgets/bob/").status_code == 200  # bob is a user, even without a budget


def test_malformed_job_ids_are_404s(clients):
    for url in ["/jobs/alice/../", "/jobs/alice/a b/", "/jobs/alice/"]:
        assert clients["alice"].get(url).status_code == 404, url
