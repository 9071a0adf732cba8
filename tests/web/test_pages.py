"""What each page says: the same facts as the API, numbers for people, and empty states that
say what to do."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.jobs.cancel import cancel_job
from scheduler.models import Attempt, DispatchIntent, Task, TickRecord, UpliftGrant, UserBudget
from scheduler.tick.run import run_tick
from tests.personas import make_worker, run_tasks, submit
from tests.web.conftest import preempt

pytestmark = pytest.mark.django_db


def text(response) -> str:
    """The page's visible text, whitespace collapsed (attributes dropped)."""
    html = response.content.decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&gt;", ">").replace("&#x27;", "'")


@pytest.fixture
def over_budget(alice, bob):
    """alice runs 18 points on a full worker against a limit of 10; her 4-core job waits."""
    w1 = make_worker("w1", cpu=2, memory_gib=8)
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=2)
    run_tasks(submit(alice, "warm", cpu=2, memory="8Gi"), w1)
    submit(alice, "train", replicas=2, cpu=4, memory="1Gi")
    submit(bob, "sweep", replicas=3, cpu=4, memory="1Gi")
    run_tick()
    return w1


# --- empty states ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, words",
    [
        ("/queue/", "The queue appears after the first scheduling tick."),
        ("/jobs/", "No jobs yet. Submit one"),
        ("/budgets/", "No user has a budget, a grant or any work yet."),
        ("/preemptions/", "No preemptions yet."),
        ("/workers/", "No workers have registered. Start one with python manage.py iris_worker"),
        ("/scheduler/", "No ticks recorded yet."),
        ("/manage/uplifts/", "No requests are waiting."),
        ("/manage/audit/", "Nothing audited yet."),
        ("/manage/tiers/", "The cluster config lists no user tiers"),
        ("/budgets/ada/", "No uplift requests yet."),
    ],
)
def test_empty_pages_say_what_to_do(clients, url, words):
    assert words in text(clients["ada"].get(url))


# --- queue ----------------------------------------------------------------------------------------


def test_queue_shows_a_downgrade_badge_with_the_ticks_numbers(clients, over_budget):
    html = clients["bob"].get("/queue/").content.decode()
    row = re.search(r"<tr>(?:(?!</tr>).)*?/alice/train</a><span class=\"muted\">/0.*?</tr>", html, re.S).group(0)
    assert 'title="INTERACTIVE runs as BATCH: spend 18 &gt; limit 10"' in row
    assert "downgraded: 8 pts over (18 &gt; 10)" in row
    assert "band-batch" in row and "band-interactive" in row
    bob_row = re.search(r"<tr>(?:(?!</tr>).)*?/bob/sweep</a><span class=\"muted\">/0.*?</tr>", html, re.S).group(0)
    assert "badge-downgrade" not in bob_row


def test_queue_filters_by_user_and_job(clients, over_budget):
    page = text(clients["bob"].get("/queue/?user=bob"))
    assert "/bob/sweep" in page and "/alice/train" not in page
    page = text(clients["bob"].get("/queue/?job=/alice/train"))
    assert "/alice/train" in page and "/bob/sweep" not in page
    page = text(clients["bob"].get("/queue/?job=swe"))
    assert "/bob/sweep" in page and "/alice/train" not in page
    assert "No pending task matches these filters." in text(clients["bob"].get("/queue/?user=nobody"))


def test_queue_band_pages_are_windows_in_scheduling_order(clients, alice):
    submit(alice, "big", replicas=120, cpu=1000)
    run_tick()
    page2 = clients["alice"].get("/queue/?band=interactive&page=2")
    body = text(page2)
    assert "51–100 of 120" in body and "Page 2 of 3" in body
    positions = [
        int(p)
        for p in re.findall(r'<td class="num">(\d+)</td>\s*<td><a href="/jobs/alice/big/"', page2.content.decode())
    ]
    assert positions == list(range(51, 101))


def test_queue_preview_links_to_the_whole_band(clients, alice):
    submit(alice, "big", replicas=15, cpu=1000)
    run_tick()
    html = clients["alice"].get("/queue/").content.decode()
    assert "Show all 15 →" in html and 'href="?band=interactive"' in html


# --- job detail -----------------------------------------------------------------------------------


def test_why_panel_gives_the_owner_the_numbers_and_the_way_out(clients, over_budget):
    page = text(clients["alice"].get("/jobs/alice/train/"))
    assert "INTERACTIVE runs as BATCH: spend 18 > limit 10" in page
    assert (
        "You are 8 points over your limit (spend 18 > limit 10); your INTERACTIVE work runs as BATCH until your "
        "running work drops to 10 points or less, or an uplift is granted."
    ) in page
    assert "Request an uplift" in page
    # 4 cores per task on a 2-core cluster: waiting will not help, and the page says so.
    assert "Never fits on the cluster as it is; 4 cores per task: 0 healthy workers have it" in page
    assert "Can it ever run? Never, on the cluster as it is" in page


def test_why_panel_speaks_of_the_owner_to_others(clients, over_budget):
    page = text(clients["bob"].get("/jobs/alice/train/"))
    assert "alice is 8 points over alice's limit" in page
    assert "Request an uplift" not in page


def test_why_panel_shows_the_round_robin_turn(clients, alice, bob):
    make_worker("w1", cpu=1, memory_gib=1)
    submit(bob, "a", replicas=2, cpu=4)
    submit(alice, "b", replicas=2, cpu=4)
    run_tick()
    page = text(clients["alice"].get("/jobs/alice/b/"))
    assert re.search(r"alice takes turn [12] of 2 in INTERACTIVE", page)
    assert "users take turns, lower spend first" in page


def test_job_page_lists_preemptions_suffered_by_whom(clients, alice, bob):
    w = make_worker("w1")
    crunch = submit(bob, "crunch", priority="batch")
    run_tasks(crunch, w)
    urgent = submit(alice, "urgent")
    preempt(crunch.tasks.get(), urgent.tasks.get(), w)
    page = text(clients["bob"].get("/jobs/bob/crunch/"))
    assert "Preemptions suffered" in page and "/alice/urgent/0" in page and "1 suffered" in page


def test_finished_job_says_nothing_would_change_it(clients, alice):
    submit(alice, "train")
    cancel_job(alice, "/alice/train")
    assert "Nothing: the job has finished (killed)." in text(clients["alice"].get("/jobs/alice/train/"))


def test_job_waiting_for_its_first_tick_says_so(clients, alice):
    submit(alice, "train")
    assert "No tick has looked at it yet" in text(clients["alice"].get("/jobs/alice/train/"))


# --- budgets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit, level", [(100, "green"), (24, "amber"), (18, "amber"), (17, "red"), (0, "unlimited")])
def test_spend_bars_turn_amber_from_75_percent_and_red_over_the_limit(clients, alice, limit, level):
    w = make_worker("w1")
    UserBudget.objects.create(user_id="alice", budget_limit=limit, max_band=2)
    run_tasks(submit(alice, "warm", cpu=2, memory="8Gi"), w)  # 18 points
    html = clients["bob"].get("/budgets/").content.decode()
    assert f'class="bar bar-{level}"' in html


def test_budgets_list_spend_limit_bands_grants_and_counts(clients, over_budget, alice):
    UpliftGrant.objects.create(user_id="alice", requested_by=alice, budget_limit=50, reason="x", duration_seconds=60)
    page = text(clients["bob"].get("/budgets/"))
    assert "18 / 10" in page and "180%" in page and "downgraded: 8 pts over" in page
    assert "requested: limit 50" in page
    html = clients["bob"].get("/budgets/").content.decode()
    alice_row = re.search(r'<tr>\s*<td><a href="/budgets/alice/">.*?</tr>', html, re.S).group(0)
    assert [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', alice_row)] == [2, 1, 2]  # jobs, running, pending
    assert "What spend means" in page and "1,000 points per accelerator chip" in page


def test_spend_is_the_newest_ticks_on_the_list_the_detail_and_the_api_and_says_so(clients, alice, bob):
    make_worker("w1")
    submit(alice, "train", replicas=2, cpu=2, memory="8Gi")  # 18 points a task
    assert "summed live (no recent tick)" in text(clients["bob"].get("/budgets/alice/"))
    tick = run_tick().tick_id
    listed = text(clients["bob"].get("/budgets/"))
    detail = text(clients["bob"].get("/budgets/alice/"))
    api = clients["bob"].get("/api/v1/budgets/alice").json()
    assert f"Spend as of tick {tick} (" in listed and "36 / 1,000" in listed
    assert re.search(rf"36 of 1,000 points (\(\S+\) )?as of tick {tick}\b", detail), detail
    assert (api["spend"], api["spend_tick"]) == (36, tick)


def test_budgets_are_listed_a_page_at_a_time(clients):
    UserBudget.objects.bulk_create([UserBudget(user_id=f"u{i:02}", budget_limit=100, max_band=2) for i in range(53)])
    first = clients["bob"].get("/budgets/").content.decode()
    second = clients["bob"].get("/budgets/?page=2").content.decode()
    rows = re.compile(r'<tr[^>]*>\s*<td><a href="/budgets/(u\d+)/">')
    assert rows.findall(first) == [f"u{i:02}" for i in range(50)]
    assert rows.findall(second) == ["u50", "u51", "u52"]
    assert "1–50 of 53" in first and "Page 2 of 2" in second
    # The poll keeps the page it is on.
    assert 'hx-get="/budgets/?page=2"' in second


def test_the_admin_budget_list_is_paginated_too(clients):
    UserBudget.objects.bulk_create([UserBudget(user_id=f"u{i:02}", budget_limit=100, max_band=2) for i in range(53)])
    first = clients["ada"].get("/manage/").content.decode()
    second = clients["ada"].get("/manage/?page=2").content.decode()
    rows = re.compile(r'<tr><td><a href="/budgets/(u\d+)/">')
    assert (len(rows.findall(first)), rows.findall(second)) == (50, ["u50", "u51", "u52"])


def test_budget_chart_is_drawn_from_tick_samples(clients, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=2)
    now = timezone.now()
    for i, (spend, limit) in enumerate([(0, 10), (12, 10), (30, 10), (5, 0)]):
        TickRecord.objects.create(
            started_at=now - timedelta(minutes=10 - i),
            now_ms=0,
            duration_ms=1,
            spend={"alice": spend},
            limits={"alice": limit},
        )
    html = clients["alice"].get("/budgets/alice/").content.decode()
    assert '<svg class="chart"' in html and 'class="spend-line"' in html
    assert html.count('class="limit-line"') == 1  # the unlimited stretch draws no limit
    assert html.count('class="over-dot"') == 2
    assert "4 tick samples" in text(clients["alice"].get("/budgets/alice/"))
    spark = clients["alice"].get("/budgets/").content.decode()
    assert '<svg class="spark"' in spark


def test_budget_page_explains_over_and_under(clients, over_budget):
    over = text(clients["alice"].get("/budgets/alice/"))
    assert "You are 8 points over the limit" in over
    UserBudget.objects.filter(user_id="alice").update(budget_limit=3000)
    under = text(clients["alice"].get("/budgets/alice/"))
    assert "Within the limit: 2,982 points of room" in under and "about 2 accelerator chips" in under


# --- preemptions ----------------------------------------------------------------------------------


def test_the_newest_events_counted_are_exactly_so_many_when_one_tick_wrote_them_all_at_one_time(alice, bob):
    """Events of one tick share their time: the newest ``among`` are cut by (time, id)."""
    from scheduler.models import PreemptionEvent
    from scheduler.tick import queries as tick_queries

    w = make_worker("w1")
    jobs = [submit(bob, f"v{i}", priority="batch") for i in range(5)]
    for job in jobs:
        run_tasks(job, w)
    urgent = submit(alice, "urgent")
    for job in jobs:
        preempt(job.tasks.get(), urgent.tasks.get(), w)
    PreemptionEvent.objects.update(created_at=timezone.now())
    counted = tick_queries.preemption_counts(tick_queries.preemptions(), among=3)
    assert sorted(c["job"] for c in counted) == ["/bob/v2", "/bob/v3", "/bob/v4"]


def test_most_preempted_jobs_are_counted_among_the_newest_events_of_the_view(clients, alice, bob, monkeypatch):
    from scheduler.tick import queries as tick_queries
    from scheduler.views import history

    w = make_worker("w1")
    crunch = submit(bob, "crunch", priority="batch")
    other = submit(bob, "other", priority="batch")
    run_tasks(crunch, w)
    run_tasks(other, w)
    urgent = submit(alice, "urgent")
    for _ in range(3):
        preempt(crunch.tasks.get(), urgent.tasks.get(), w)
    for _ in range(2):  # the newest two
        preempt(other.tasks.get(), urgent.tasks.get(), w)
    everything = tick_queries.preemptions()
    assert [(c["job"], c["count"]) for c in tick_queries.preemption_counts(everything)] == [
        ("/bob/crunch", 3),
        ("/bob/other", 2),
    ]
    assert [(c["job"], c["count"]) for c in tick_queries.preemption_counts(everything, among=3)] == [
        ("/bob/other", 2),
        ("/bob/crunch", 1),
    ]
    assert "Counted among the newest" not in clients["alice"].get("/preemptions/").content.decode()
    monkeypatch.setattr(history, "COUNTED_EVENTS", 4)
    monkeypatch.setattr(tick_queries, "COUNTED_EVENTS", 4)
    html = clients["alice"].get("/preemptions/").content.decode()
    assert "Counted among the newest 4 preemptions of this view." in html
    counts = re.findall(
        r'<a href="/jobs/bob/(\w+)/">/bob/\w+</a>(?: <span class="badge badge-repeat">repeated</span>)?</td><td class="num">(\d+)',
        html,
    )
    assert counts == [("crunch", "2"), ("other", "2")]


def test_repeatedly_preempted_jobs_are_flagged_and_counted(clients, alice, bob):
    w = make_worker("w1")
    crunch = submit(bob, "crunch", priority="batch")
    other = submit(bob, "other", priority="batch")
    run_tasks(crunch, w)
    run_tasks(other, w)
    urgent = submit(alice, "urgent")
    for _ in range(3):
        preempt(crunch.tasks.get(), urgent.tasks.get(), w)
    preempt(other.tasks.get(), urgent.tasks.get(), w)
    html = clients["alice"].get("/preemptions/").content.decode()
    assert html.count("repeatedly preempted") == 3
    counts = re.findall(
        r'<a href="/jobs/bob/(\w+)/">/bob/\w+</a>(?: <span class="badge badge-repeat">repeated</span>)?</td><td class="num">(\d+)',
        html,
    )
    assert counts == [("crunch", "3"), ("other", "1")]
    assert "/bob/other" in text(clients["alice"].get("/preemptions/?job=bob/other"))
    assert "/bob/crunch" not in text(clients["alice"].get("/preemptions/?job=bob/other")).split("Most preempted")[0]
    assert "No preemption matches" in text(clients["alice"].get("/preemptions/?user=alice"))
    assert "No preemption matches" in text(clients["alice"].get("/preemptions/?band=interactive"))


# --- workers and scheduler state ------------------------------------------------------------------


def test_workers_show_capacity_held_by_unfinished_attempts(clients, alice):
    w = make_worker("w1", cpu=8, memory_gib=64, device=("gpu", "h100", 8))
    run_tasks(submit(alice, "gpu", cpu=2, memory="16Gi", device={"type": "gpu", "variant": "h100", "count": 4}), w)
    page = text(clients["alice"].get("/workers/"))
    assert "2 cores / 8 cores" in page and "16 GiB / 64 GiB" in page and "4 / 8" in page and "h100 GPU" in page
    assert "/alice/gpu/0" in page and "healthy" in page
    assert "Drain" not in page  # researchers do not drain


def test_a_worker_over_capacity_by_ending_attempts_says_so_and_is_not_red(clients, alice, bob):
    # bob's attempt was preempted for alice's, placed in the same tick: until the worker confirms
    # bob's process stopped, both hold its 4 cores.
    w = make_worker("w1", cpu=4, memory_gib=64)
    run_tasks(submit(bob, "victim", cpu=4), w)
    Attempt.objects.filter(task__job__name="/bob/victim").update(state="preempted")
    Task.objects.filter(job__name="/bob/victim").update(state="pending", worker=None)
    run_tasks(submit(alice, "preemptor", cpu=4), w)
    html = clients["alice"].get("/workers/").content.decode()
    page = text(clients["alice"].get("/workers/"))
    assert "8 cores / 4 cores" in page
    assert (
        "4 cores of it held by attempts ending (preempted or finished) until the worker confirms them stopped" in page
    )
    assert "bar-amber" in html and "bar-red" not in html


def test_scheduler_state_shows_ticks_lag_counts_and_stuck_intents(clients, over_budget, alice):
    task = alice and submit(alice, "x").tasks.get()
    DispatchIntent.objects.create(
        task=task,
        attempt_number=1,
        kind="start",
        state="failed",
        tries=8,
        last_error="connection refused",
        created_at=timezone.now(),
    )
    page = text(clients["olivia"].get("/scheduler/"))
    assert "Recent ticks" in page and "just now" in page
    assert "1 stuck" in page and "connection refused" in page
    assert re.search(r"alice · · 0 / 1 2 / 0", page)  # INTERACTIVE running 1; BATCH pending 2
    assert re.search(r"bob · · 3 / 0", page)


def test_tiers_show_the_config_as_loaded_and_rows_that_drifted(clients, settings, tmp_path):
    config = tmp_path / "cluster.toml"
    config.write_text(
        '[budget_defaults]\nbudget_limit = 50\nmax_band = "interactive"\n\n'
        '[[user_budgets]]\nuser_ids = ["alice", "bob"]\nbudget_limit = 20000\nmax_band = "interactive"\n\n'
        '[[user_budgets]]\nuser_ids = ["bob", "carol"]\nbudget_limit = 30\nmax_band = "batch"\n'
    )
    settings.CLUSTER_CONFIG = str(config)
    UserBudget.objects.create(user_id="alice", budget_limit=20000, max_band=2)
    UserBudget.objects.create(user_id="bob", budget_limit=99, max_band=3)
    html = clients["ada"].get("/manage/tiers/").content.decode()
    page = text(clients["ada"].get("/manage/tiers/"))
    assert str(config) in page and "limit 50" in page
    assert "20,000" in page and "30" in page
    assert html.count('class="member overridden"') == 1  # bob in tier 1: tier 2 wins
    assert "bob differs" in page and "carol no row" in page
    assert "alice differs" not in page and "alice no row" not in page


def test_scheduler_state_running_counts_are_the_ticks_and_match_the_task_table(clients, over_budget, alice, bob):
    """The page's running figures come from the tick (scheduler.board.counts); right after a
    tick they equal the live grouped counts over the task table, and the page says which tick."""
    from scheduler.board.read import queue_index
    from scheduler.tick.queries import running_by_band_user, task_counts_by_state

    make_worker("w2", cpu=8, memory_gib=8)
    run_tick()  # places some of bob's and alice's waiting tasks on w2
    index = queue_index()
    assert index.running == running_by_band_user()
    live = task_counts_by_state()
    assert index.active_by_state == {s: n for s, n in live.items() if s in ("assigned", "building", "running")}
    assert sum(index.running.values()) >= 2
    page = text(clients["olivia"].get("/scheduler/"))
    assert f"Running (placed) at tick {index.tick_pk}" in page and f"Both as of tick {index.tick_pk}" in page
    assert f"{index.active_by_state.get('assigned', 0)} assigned" in page


def test_scheduler_state_lists_no_tick_newer_than_the_one_its_figures_are_of(clients, over_budget, alice):
    """Seen in the demo: "LEFT PENDING AT TICK 216" above a "Recent ticks" table whose newest row
    was 215 (a tick committed between the page's two reads). The table goes up to the tick the
    cards are of: a newer tick, committed but not yet read by the board, is not listed."""
    from scheduler.board.read import queue_index

    run_tick()
    board_tick = queue_index().tick_pk
    newer = TickRecord.objects.create(started_at=timezone.now(), now_ms=0, duration_ms=1.0)  # nothing published
    response = clients["olivia"].get("/scheduler/")
    listed = [tick.pk for tick in response.context["ticks"]]
    assert listed[0] == board_tick and newer.pk not in listed
    assert f"Left pending at tick {board_tick}" in text(response)


def test_scheduler_state_card_and_band_table_count_running_work_as_one_number(clients, over_budget, alice, bob):
    """Issue 23: "RUNNING AT TICK 90: 15" beside a table whose running column added up to 19 (the
    tick's new assignments were in one and not the other). The card's figure is the table's
    running total, and both include what the tick just assigned."""
    import re

    from scheduler.board.read import queue_index

    make_worker("w2", cpu=8, memory_gib=8)
    run_tick()  # new assignments: ASSIGNED until their worker reports
    index = queue_index()
    assert index.active_by_state.get("assigned", 0) >= 1 and index.active_by_state.get("running", 0) >= 1
    html = clients["olivia"].get("/scheduler/").content.decode()

    footer = html[html.index("<tfoot>") : html.index("</tfoot>")]
    running_column = sum(
        int(r.replace(",", "")) for _, r in re.findall(r'<th class="num">([\d,]+) / ([\d,]+)</th>', footer)
    )
    assert running_column == sum(index.active_by_state.values())
    # Every card counting running work shows that number, and names the tick.
    cards = re.findall(r'<span class="label">([^<]*unning[^<]*)</span><strong[^>]*>([\d,]+)</strong>', html)
    assert cards
    for label, figure in cards:
        assert (label, int(figure.replace(",", ""))) == (f"Running (placed) at tick {index.tick_pk}", running_column)


def live_counts_by_user() -> dict[str, tuple[int, int, int]]:
    """The reference: each user's pending and active tasks and unfinished jobs, grouped over the
    task and job tables now."""
    from django.db.models import Count

    from scheduler.models import Job, Task

    counts: dict[str, list[int]] = {}
    for user, state, n in (
        Task.objects.filter(state__in=["pending", "assigned", "building", "running"])
        .order_by()
        .values_list("job__user", "state")
        .annotate(n=Count("id"))
    ):
        counts.setdefault(user, [0, 0, 0])[state != "pending"] += n
    for user, n in (
        Job.objects.filter(state__in=["pending", "running"]).order_by().values_list("user").annotate(n=Count("id"))
    ):
        counts.setdefault(user, [0, 0, 0])[2] = n
    return {user: tuple(c) for user, c in counts.items()}


def test_budgets_counts_are_the_ticks_and_match_the_task_table_and_the_scheduler_page(clients, over_budget, alice, bob):
    """Jobs, running and pending on the budgets pages come from the tick, as the scheduler page's
    figures do: right after a tick they equal the live grouped counts; between ticks they stay
    the tick's, so the two pages never disagree, and each page says which tick."""
    from scheduler.board.read import queue_index

    make_worker("w2", cpu=8, memory_gib=8)
    run_tick()
    index = queue_index()
    assert {user: tuple(c) for user, c in index.by_user.items()} == live_counts_by_user()
    assert index.by_user["bob"].active >= 1 and index.by_user["bob"].pending >= 1
    # One computation behind both pages: a user's running count is the sum of their band cells.
    for user, counts in index.by_user.items():
        assert counts.active == sum(n for (_, u), n in index.running.items() if u == user)

    def budgets_row(user):
        html = clients["olivia"].get("/budgets/").content.decode()
        row = re.search(rf'<tr[^>]*>\s*<td><a href="/budgets/{user}/">.*?</tr>', html, re.S).group(0)
        return [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', row)]

    bob_counts = index.by_user["bob"]
    assert budgets_row("bob") == [bob_counts.jobs, bob_counts.active, bob_counts.pending]
    assert f"counted at tick {index.tick_pk}" in text(clients["olivia"].get("/budgets/"))
    assert (
        f"{bob_counts.jobs} active job(s), {bob_counts.active} task(s) running, {bob_counts.pending} pending "
        f"(at tick {index.tick_pk})"
    ) in text(clients["olivia"].get("/budgets/bob/"))
    # bob's work ends between ticks: the budgets page still shows the tick's counts, as the
    # scheduler page does, until the next tick counts again.
    cancel_job(bob, "/bob/sweep")
    assert budgets_row("bob") == [bob_counts.jobs, bob_counts.active, bob_counts.pending]
    run_tick()
    assert "bob" not in queue_index().by_user
    assert 'href="/budgets/bob/"' not in clients["olivia"].get("/budgets/").content.decode()


def test_migration_0033_gives_each_kept_event_its_victims_job(alice, bob):
    """Events written before the tick carried ``victim_job``: the fill sets each from its victim task."""
    import importlib

    from django.db import connection

    from scheduler.models import PreemptionEvent

    fill = importlib.import_module("scheduler.migrations.0033_preemption_victim_job").FILL
    w = make_worker("w1")
    crunch, other = submit(bob, "crunch", priority="batch"), submit(bob, "other", priority="batch")
    run_tasks(crunch, w)
    run_tasks(other, w)
    urgent = submit(alice, "urgent")
    preempt(crunch.tasks.get(), urgent.tasks.get(), w)
    preempt(other.tasks.get(), urgent.tasks.get(), w)
    PreemptionEvent.objects.update(victim_job=urgent)  # wrong on purpose: the fill must overwrite it
    with connection.cursor() as cursor:
        cursor.execute(fill)
    assert sorted(PreemptionEvent.objects.values_list("victim__job__name", "victim_job__name")) == [
        ("/bob/crunch", "/bob/crunch"),
        ("/bob/other", "/bob/other"),
    ]


@pytest.mark.postgres
def test_the_most_preempted_jobs_are_grouped_from_the_covering_index_alone(alice, bob):
    """The grouped read of :func:`preemption_counts` selects only columns of the covering index
    ``preemption_recent_lost`` (migration 0033): PostgreSQL can answer it without the events'
    rows, and never visits their tasks (a lookup per event: 40 ms at 10,000 beside a year of
    history; docs/benchmarks.md)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.tick import queries as tick_queries

    w = make_worker("w1")
    crunch = submit(bob, "crunch", priority="batch")
    run_tasks(crunch, w)
    urgent = submit(alice, "urgent")
    for _ in range(3):
        preempt(crunch.tasks.get(), urgent.tasks.get(), w)
    with CaptureQueriesContext(connection) as captured:
        counted = tick_queries.preemption_counts(tick_queries.preemptions(), among=2)
    assert [(c["job"], c["count"]) for c in counted] == [("/bob/crunch", 2)]
    (grouped,) = [q["sql"] for q in captured.captured_queries if "GROUP BY" in q["sql"]]
    assert "scheduler_task" not in grouped and "scheduler_job" not in grouped
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + grouped)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan using preemption_recent_lost" in plan, plan
