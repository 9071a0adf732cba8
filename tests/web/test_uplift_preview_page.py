"""The approval page shows an uplift's effect before approval: each request card loads its
preview (HTMX, rendered server-side from the typed preview); the preview has a page of its own
for a browser without scripts; only admins see it."""

from __future__ import annotations

import pytest

from scheduler.budgets.preview import preview_grant
from scheduler.budgets.writes import request_uplift
from scheduler.core.bands import Band
from scheduler.models import UserBudget
from scheduler.store import clock
from scheduler.tick.run import run_tick
from tests.personas import make_job, make_worker, run_tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def grant(bob):
    UserBudget.objects.create(user_id="bob", budget_limit=1, max_band=int(Band.INTERACTIVE))
    worker = make_worker("w1", cpu=4, memory_gib=16)
    run_tasks(make_job("/bob/run", cpu=3, memory_gib=1), worker)
    make_job("/bob/train", replicas=2, cpu=2, memory_gib=1)
    run_tick(clock.now_ms())
    return request_uplift(bob, budget_limit=0, reason="deadline", duration_seconds=3600)


def test_the_approval_page_loads_each_requests_preview(clients, grant):
    page = clients["ada"].get("/manage/uplifts/").content.decode()
    url = f"/manage/uplifts/{grant.pk}:preview"
    assert f'href="{url}" hx-get="{url}"' in page
    assert 'hx-trigger="load, click"' in page


def test_the_preview_fragment_shows_the_moved_tasks_as_the_preview_computed_them(clients, ada, grant):
    response = clients["ada"].get(f"/manage/uplifts/{grant.pk}:preview", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html  # the fragment alone
    computed = preview_grant(ada, grant.pk).preview
    assert [m.task for m in computed.tasks] == ["/bob/train/0", "/bob/train/1"]
    for m in computed.tasks:
        # One computation, shown as it is: the band badges and the places before and after.
        assert f">{m.task}</a>" in html
        assert f"{m.position_before} of {m.band_pending_before}" in html
        assert f"{m.position_after} of {m.band_pending_after}" in html
    assert "approving moves\n    <strong>2</strong>" in html


def test_the_preview_has_a_page_of_its_own(clients, grant):
    response = clients["ada"].get(f"/manage/uplifts/{grant.pk}:preview")
    assert response.status_code == 200
    assert "<html" in response.content.decode()


@pytest.mark.parametrize(
    ("persona", "status"), [("anonymous", 302), ("alice", 403), ("bob", 403), ("olivia", 403), ("ada", 200)]
)
def test_only_admins_see_a_preview(clients, grant, persona, status):
    assert clients[persona].get(f"/manage/uplifts/{grant.pk}:preview").status_code == status


def test_a_preview_before_any_tick_says_why_there_is_none(clients, bob):
    grant = request_uplift(bob, budget_limit=0, reason="deadline", duration_seconds=3600)
    html = clients["ada"].get(f"/manage/uplifts/{grant.pk}:preview", HTTP_HX_REQUEST="true").content.decode()
    assert "preview after the first tick" in html
