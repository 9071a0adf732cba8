"""The downgrade rule is stated once (``core.budget``): the jobs table's SQL mirror
(``jobs.listing.effective_rank`` / ``effective_is``, built from ``DOWNGRADABLE_BANDS`` and
``DOWNGRADED_BAND``) gives every job the band ``core.budget.effective_band`` gives it, on
generated budgets, spends, bands and states; and every sentence about a downgrade is
``core.explain.Downgrade``'s."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.budgets.rules import budget_defaults
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.explain import Downgrade, downgrade_rule_text
from scheduler.core.types import BudgetSpec
from scheduler.jobs import listing
from scheduler.models import Attempt, Job, Task, UserBudget, Worker
from scheduler.store.states import LIVE_JOB_VALUES
from tests.personas import make_job, make_worker, run_tasks

pytestmark = pytest.mark.django_db

USERS = ("ann", "ben", "cat")
# None: no budget row, the cluster defaults apply; 0: unlimited.
LIMITS = (None, 0, 5, 10, 15)
STATES = ("pending", "running", "succeeded", "killed", "failed")
CORE_POINTS = 5  # core.budget.CORE_POINTS: one core, no memory, is 5 points

users_strategy = st.tuples(*(st.tuples(st.sampled_from(LIMITS), st.integers(0, 3)) for _ in USERS))
jobs_strategy = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from(list(Band)), st.sampled_from(STATES)), min_size=1, max_size=12
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(budgets=users_strategy, jobs=jobs_strategy)
def test_the_jobs_tables_sql_gives_every_job_the_cores_effective_band(budgets, jobs):
    for model in (Attempt, Task, Job, Worker, UserBudget):
        model.objects.all().delete()
    worker = make_worker("w1", cpu=64, memory_gib=64)
    rows, spend = {}, {}
    for user, (limit, cores) in zip(USERS, budgets, strict=True):
        if limit is not None:
            UserBudget.objects.create(user_id=user, budget_limit=limit, max_band=Band.SYSTEM)
            rows[user] = BudgetSpec(user=user, budget_limit=limit, max_band=Band.SYSTEM)
        if cores:
            # Spend: a running INTERACTIVE task of ``cores`` cores and no memory.
            run_tasks(make_job(f"/{user}/spend", cpu=cores, memory_gib=0), worker)
            spend[user] = cores * CORE_POINTS
    for i, (user, band, state) in enumerate(jobs):
        job = make_job(f"/{user}/j{i}", band=band)
        Job.objects.filter(pk=job.pk).update(state=state)
    defaults = budget_defaults()

    def expected(job: Job) -> Band:
        if job.state not in LIVE_JOB_VALUES:
            return Band(job.band)  # a finished job's effective band is its requested band
        return effective_band(Band(job.band), job.user, spend, rows, defaults)

    everything = list(Job.objects.all())
    over = listing.over_budget_users()
    ranked = dict(Job.objects.annotate(effective=listing.effective_rank(over)).values_list("name", "effective"))
    assert ranked == {j.name: int(expected(j)) for j in everything}
    for band in Band:
        chosen = set(Job.objects.filter(listing.effective_is(band, over)).values_list("name", flat=True))
        assert chosen == {j.name for j in everything if expected(j) is band}, band


def test_every_downgrade_sentence_comes_from_the_one_record():
    d = Downgrade.of(Band.INTERACTIVE, 12_400, 10_000)
    assert d == Downgrade(Band.INTERACTIVE, Band.BATCH, 12_400, 10_000)
    assert d.text() == "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"
    assert d.badge() == "downgraded: 2,400 pts over (12,400 > 10,000)"
    assert d.advice("You are", "your").startswith("You are 2,400 points over your limit (spend 12,400 > limit 10,000)")
    assert "queue as BATCH behind all INTERACTIVE work" in d.remedy("alice")
    assert Downgrade.of(Band.INTERACTIVE, 10_000, 10_000) is None  # at the limit is fine
    assert Downgrade.of(Band.INTERACTIVE, 99, 0) is None  # 0 is unlimited
    assert Downgrade.of(Band.PRODUCTION, 12_400, 10_000) is None
    assert downgrade_rule_text() == (
        "While spend is over the limit, pending INTERACTIVE work runs as BATCH; "
        "SYSTEM and PRODUCTION work is never downgraded"
    )
