"""The jobs table's filter, sort and grouping (scheduler.jobs.listing) against a reference
computed in Python over the same rows, and its refusals of bad values."""

from __future__ import annotations

import itertools
import random

import pytest

from scheduler.core.bands import Band
from scheduler.core.budget import DOWNGRADABLE_BANDS, effective_band
from scheduler.core.types import BudgetDefaults, BudgetSpec
from scheduler.foundation.errors import InvalidArgument
from scheduler.jobs import listing
from scheduler.models import Job, UserBudget
from tests.personas import NOW_MS, make_job, make_worker, run_tasks

pytestmark = pytest.mark.django_db

DAY_MS = 86_400_000
USERS = ["alice", "bob", "carol"]
STATES = ["pending", "running", "succeeded", "killed"]
ROUTES = ["", "workers", "kubernetes"]
# 2027-01-12 00:00 UTC: NOW_MS is 2027-01-15 08:00 UTC; jobs are spread over four days before it.
FIRST_DAY_MS = NOW_MS - NOW_MS % DAY_MS - 3 * DAY_MS


def test_downgradable_bands_agree_with_the_core_rule():
    over = {"u": BudgetSpec(user="u", budget_limit=1, max_band=Band.SYSTEM)}
    defaults = BudgetDefaults(budget_limit=0, max_band=Band.INTERACTIVE)
    downgraded = {b for b in Band if effective_band(b, "u", {"u": 2}, over, defaults) != b}
    assert downgraded == set(DOWNGRADABLE_BANDS)


@pytest.fixture
def table():
    """36 jobs over every user, band, state and route, submitted over four days; carol is
    over her budget (a running INTERACTIVE task against a limit of 1)."""
    rng = random.Random(7)
    combos = list(itertools.product(USERS, Band, STATES))
    rng.shuffle(combos)
    for i, (user, band, state) in enumerate(combos[:36]):
        job = make_job(
            f"/{user}/{'train' if i % 3 else 'Eval'}-{i:02d}",
            band=band,
            submitted_at_ms=FIRST_DAY_MS + rng.randrange(4 * DAY_MS),
            replicas=1 + i % 3,
        )
        Job.objects.filter(pk=job.pk).update(state=state, route=ROUTES[i % 3])
    UserBudget.objects.create(user_id="carol", budget_limit=1, max_band=Band.INTERACTIVE)
    spender = make_job("/carol/spender", band=Band.INTERACTIVE, submitted_at_ms=FIRST_DAY_MS)
    run_tasks(spender, make_worker())
    rows = list(Job.objects.all())
    assert any(effective(j) != j.band for j in rows)  # the downgrade is really exercised
    return rows


def effective(job: Job) -> int:
    """The reference rule, written out: carol's unfinished INTERACTIVE jobs run as BATCH."""
    live = job.state in ("pending", "running")
    return int(Band.BATCH) if job.user == "carol" and job.band == Band.INTERACTIVE and live else job.band


FILTERS = [
    ({}, lambda j: True),
    ({"user": "alice"}, lambda j: j.user == "alice"),
    ({"band": "interactive"}, lambda j: j.band == Band.INTERACTIVE),
    ({"effective": "batch"}, lambda j: effective(j) == Band.BATCH),
    ({"effective": "interactive"}, lambda j: effective(j) == Band.INTERACTIVE),
    ({"state": "pending", "user": "carol"}, lambda j: j.state == "pending" and j.user == "carol"),
    ({"route": "unrouted"}, lambda j: j.route == ""),
    ({"route": "kubernetes", "band": "batch"}, lambda j: j.route == "kubernetes" and j.band == Band.BATCH),
    ({"name": "eval"}, lambda j: "eval" in j.name.lower()),
    (
        {"submitted_after": "2027-01-13", "submitted_before": "2027-01-14"},
        lambda j: FIRST_DAY_MS + DAY_MS <= j.submitted_at_ms < FIRST_DAY_MS + 3 * DAY_MS,
    ),
]

SORT_KEYS = {
    "name": lambda j: j.name,
    "user": lambda j: j.user,
    "band": lambda j: j.band,
    "effective": effective,
    "state": lambda j: j.state,
    "route": lambda j: j.route,
    "tasks": lambda j: j.replicas,
    "submitted": lambda j: j.submitted_at_ms,
}


def listed(params: dict) -> list[str]:
    f, view = listing.parse_filter(params), listing.parse_view(params)
    return list(
        listing.ordered(listing.filtered_jobs(f, listing.over_budget_users()), view).values_list("name", flat=True)
    )


@pytest.mark.parametrize("params, keep", FILTERS, ids=[str(p) for p, _ in FILTERS])
def test_each_filter_matches_the_python_reference(table, params, keep):
    expected = sorted((j for j in table if keep(j)), key=lambda j: (-j.submitted_at_ms, -j.pk))
    assert listed(params) == [j.name for j in expected]


@pytest.mark.parametrize("column", list(SORT_KEYS))
@pytest.mark.parametrize("descending", [False, True])
def test_each_sort_matches_the_python_reference(table, column, descending):
    key = SORT_KEYS[column]
    expected = sorted(table, key=lambda j: (key(j), j.pk), reverse=descending)
    assert listed({"sort": f"-{column}" if descending else column}) == [j.name for j in expected]


@pytest.mark.parametrize("group", list(listing.GROUPS))
def test_grouping_orders_by_the_group_then_the_sort_and_counts_each_group(table, group):
    key = {"user": lambda j: j.user, "band": lambda j: j.band, "effective": effective}[group]
    params = {"group": group, "sort": "name", "state": "pending"}
    rows = [j for j in table if j.state == "pending"]
    expected = sorted(rows, key=lambda j: (key(j), j.name, j.pk))
    assert listed(params) == [j.name for j in expected]
    qs = listing.filtered_jobs(listing.parse_filter(params), listing.over_budget_users())
    counts = listing.group_counts(qs, group)
    assert counts == {k: sum(1 for j in rows if key(j) == k) for k in {key(j) for j in rows}}


@pytest.mark.parametrize(
    "params, field",
    [
        ({"band": "urgent"}, "band"),
        ({"effective": "7"}, "effective"),
        ({"state": "sleeping"}, "state"),
        ({"route": "slurm"}, "route"),
        ({"name": "x" * 151}, "name"),
        ({"submitted_after": "yesterday"}, "submitted_after"),
        ({"submitted_after": "2027-01-14", "submitted_before": "2027-01-13"}, "submitted_before"),
    ],
)
def test_a_bad_filter_value_is_refused_naming_its_field(params, field):
    with pytest.raises(InvalidArgument) as refused:
        listing.parse_filter(params)
    assert refused.value.field == field and refused.value.message.startswith(f"{field}: ")


@pytest.mark.parametrize("params, field", [({"sort": "colour"}, "sort"), ({"group": "state"}, "group")])
def test_a_bad_sort_or_grouping_is_refused(params, field):
    with pytest.raises(InvalidArgument) as refused:
        listing.parse_view(params)
    assert refused.value.field == field


def test_a_strict_filter_refuses_unknown_keys_so_a_typo_never_widens_it():
    with pytest.raises(InvalidArgument) as refused:
        listing.parse_filter({"usr": "alice"}, strict=True)
    assert refused.value.field == "filter" and "usr" in refused.value.message
    assert listing.parse_filter({"usr": "alice"}).empty  # the console and GET ignore other parameters


def test_with_nobody_over_budget_the_effective_band_is_the_requested_band():
    for i, band in enumerate(Band):
        make_job(f"/alice/j{i}", band=band)
    for band in Band:
        assert listed({"effective": band.wire}) == listed({"band": band.wire}) != []


def test_a_count_stops_at_its_limit_and_says_it_did(table):
    qs = listing.filtered_jobs(listing.parse_filter({}), frozenset())
    total = qs.count()
    assert listing.count_of(qs, limit=total) == listing.JobCount(total, True)
    assert listing.count_of(qs, limit=total + 50) == listing.JobCount(total, True)
    assert listing.count_of(qs, limit=total - 1) == listing.JobCount(total - 1, False)
    assert listing.count_of(qs, limit=1) == listing.JobCount(1, False)
    alice = listing.filtered_jobs(listing.parse_filter({"user": "alice"}), frozenset())
    assert listing.count_of(alice, limit=total - 1) == listing.JobCount(alice.count(), True)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "params",
    [{"user": "alice"}, {"state": "succeeded"}, {"band": "batch"}, {"route": "workers"}],
)
def test_a_filters_count_can_read_its_index_alone(table, params):
    """The count of an equality filter selects only the filter's columns and the id, so
    PostgreSQL can answer it from the filter's index without visiting the table (an index-only
    scan, once vacuum has marked the history's pages all-visible): at 94,000 jobs of one user that
    is 100 index pages against 14,000 of the table (docs/benchmarks.md, "The jobs table and the
    scheduler page beside a year of history"). The effective band's CASE must not reach it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    qs = listing.filtered_jobs(listing.parse_filter(params), frozenset({"carol"}))
    with CaptureQueriesContext(connection) as captured:
        listing.count_of(qs)
    (count,) = captured.captured_queries
    with connection.cursor() as cursor:
        # A few dozen rows: the planner would read the table whatever the statement's shape.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + count["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan" in plan, plan
