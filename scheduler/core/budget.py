"""Resource value, user spend and the effective band.

Budgets are in abstract *points*. A task's value is what its request would cost if it ran;
a user's spend is the instantaneous sum over their active tasks (no window, no decay, no
history), computed once per tick from the snapshot and not updated while the tick decides.
The effective band is the band a *pending* task is scheduled in this tick: the requested band,
or BATCH when the user is over budget. Running tasks keep the band stamped at assignment; this
module never looks at it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.core.bands import ADMIN_BANDS, Band
from scheduler.core.types import ACTIVE_STATES, BudgetDefaults, BudgetSpec, JobSpec, Resources, TaskSnapshot

# Points per accelerator chip (GPU or TPU). Accelerators dominate cost, so the default budget of
# 1000 points admits about one chip's worth of work per user.
ACCELERATOR_POINTS = 1000
# Points per whole GiB of memory requested (fractions are dropped).
GIB_POINTS = 1
GIB = 1 << 30
# Points per whole CPU core requested (fractions are dropped).
CORE_POINTS = 5
MILLICORES_PER_CORE = 1000
# The largest budget limit, in points: far above any cluster's total value (a million
# accelerator chips are 10^9 points) and well inside the 64-bit column budgets are stored in.
MAX_BUDGET_POINTS = 10**15


def resource_value(resources: Resources) -> int:
    """Points one task with this request is charged while it is active.

    ``1000 × chips + floor(GiB) + 5 × floor(cores)``: 1.5 cores and 1.5 GiB are worth 6 points.
    A CPU-only request with no memory is worth 0.
    """
    device = resources.device
    chips = device.gpu_count + device.tpu_count
    return (
        ACCELERATOR_POINTS * chips
        + GIB_POINTS * (resources.memory_bytes // GIB)
        + CORE_POINTS * (resources.cpu_millicores // MILLICORES_PER_CORE)
    )


def user_spend(jobs: Mapping[str, JobSpec], tasks: Iterable[TaskSnapshot]) -> dict[str, int]:
    """Spend per user: ``value × count`` over ASSIGNED/BUILDING/RUNNING tasks.

    Only tasks whose job was *requested* above BATCH count; a job requested INTERACTIVE but
    stamped BATCH at assignment still counts, and SYSTEM/PRODUCTION work counts too. Users with
    zero spend are left out; the result is sorted by user.
    """
    counts: dict[str, int] = {}
    for task in tasks:
        if task.state in ACTIVE_STATES:
            counts[task.job_id] = counts.get(task.job_id, 0) + 1
    return spend_from_counts(jobs, counts)


def spend_from_counts(jobs: Mapping[str, JobSpec], active_counts: Mapping[str, int]) -> dict[str, int]:
    """:func:`user_spend` from the number of active tasks per job id."""
    spend: dict[str, int] = {}
    # Keyed by identity: jobs share Resources objects, and ``jobs`` keeps them alive.
    values: dict[int, int] = {}
    batch = Band.BATCH  # enum lookups are slow in loops
    for job_id, count in active_counts.items():
        job = jobs[job_id]
        if job.band is batch:
            continue
        value = values.get(id(job.resources))
        if value is None:
            value = values[id(job.resources)] = resource_value(job.resources)
        if value:
            spend[job.user] = spend.get(job.user, 0) + value * count
    return dict(sorted(spend.items()))


def spend_change(jobs: Mapping[str, JobSpec], started_minus_stopped: Mapping[str, int]) -> dict[str, int]:
    """What a tick's changes add to its users' spend: for each job id, the tasks that became
    active minus those that stopped being active (as :func:`spend_from_counts` prices them).
    Users whose spend does not move are left out; ``spend + change`` is the spend once the
    tick committed."""
    change: dict[str, int] = {}
    for job_id, delta in started_minus_stopped.items():
        job = jobs[job_id]
        if not delta or job.band is Band.BATCH:
            continue
        value = resource_value(job.resources) * delta
        if value:
            change[job.user] = change.get(job.user, 0) + value
    return {user: value for user, value in sorted(change.items()) if value}


def spend_with(spend: Mapping[str, int], change: Mapping[str, int]) -> dict[str, int]:
    """``spend`` with a tick's ``change`` added (users left at zero dropped)."""
    total = dict(spend)
    for user, value in change.items():
        total[user] = total.get(user, 0) + value
    return {user: value for user, value in sorted(total.items()) if value}


def budget_limit(user: str, budgets: Mapping[str, BudgetSpec], defaults: BudgetDefaults) -> int:
    """The user's limit in points: their budget row, else the cluster default. 0 means unlimited."""
    spec = budgets.get(user)
    return spec.budget_limit if spec is not None else defaults.budget_limit


# THE downgrade rule, as data: pending work requested in one of DOWNGRADABLE_BANDS is scheduled
# in DOWNGRADED_BAND while its user is over budget (is_over_budget). SYSTEM and PRODUCTION are
# never downgraded, and BATCH is already BATCH. effective_band applies it; the jobs table's SQL
# mirror (jobs/listing.py) is built from these two names and tested equal to effective_band
# (tests/jobs/test_downgrade_rule.py); the sentences about it are core/explain's Downgrade.
DOWNGRADED_BAND = Band.BATCH
DOWNGRADABLE_BANDS = frozenset(Band) - ADMIN_BANDS - {DOWNGRADED_BAND}


def is_over_budget(spend: int, limit: int) -> bool:
    """Strictly over a positive limit; a limit of 0 is unlimited and spend equal to it is fine."""
    return limit > 0 and spend > limit


def effective_band(
    requested: Band,
    user: str,
    spend: Mapping[str, int],
    budgets: Mapping[str, BudgetSpec],
    defaults: BudgetDefaults,
) -> Band:
    """The band a pending task of ``user`` requested as ``requested`` is scheduled in this tick.

    SYSTEM and PRODUCTION are never downgraded. Any other band becomes BATCH while the user is
    strictly over a positive limit. Because the input is always the requested band, a user who
    drops back under budget is re-promoted on the next tick.
    """
    if requested in DOWNGRADABLE_BANDS and is_over_budget(spend.get(user, 0), budget_limit(user, budgets, defaults)):
        return DOWNGRADED_BAND
    return requested


def downgraded_band(requested: Band, spend: int, limit: int) -> Band:
    """:func:`effective_band` for one user's spend and effective limit, already looked up."""
    return DOWNGRADED_BAND if requested in DOWNGRADABLE_BANDS and is_over_budget(spend, limit) else requested
