"""Fairness as one tick saw it: per band, each user with demand there, their running
resource value and share of the band's, the equal share, pending tasks, whether they were over
budget and whether they got a turn; and the smallest job left waiting, with why. Pure: no
Django, no clock.

Computed from the snapshot and the decision of the same tick (``fairness_sample``), so the
numbers are the tick's own: the tick stores the sample in its record, in the same transaction,
and the fairness page and ``GET fairness/`` read it back without recomputing anything.

Definitions (per effective band):

- **running value**: the resource value (``core.budget.resource_value`` of one task) of the
  user's tasks active after the decision in that band: active at tick start and not evicted
  this tick (by their stamped band), plus those assigned this tick (by the band stamped now);
- **share**: running value / the band's running value (0 when the band runs nothing);
- **demand**: a user has demand in a band when they run or wait there after the decision;
  **equal share** is 1 / the number of users with demand;
- **pending**: the user's tasks the tick left pending in that band (``core.explain.pending_queue``);
- **over budget**: spend at tick start above the user's limit (a limit of 0 is unlimited);
- **turn**: the user had at least one task assigned in that band this tick;
- **smallest waiting job**: of the jobs with tasks left pending in the band, the one with the
  smallest per-task resource value (ties: fewer pending tasks, then job id), with its first
  pending task's reason as a record.

The stored form is small: per band, per user, four integers (not per task).
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.bands import Band
from scheduler.core.budget import budget_limit, is_over_budget, resource_value
from scheduler.core.explain import pending_queue, queued_job_counts, queued_jobs, reason_record
from scheduler.core.types import ACTIVE_STATES, ClusterSnapshot, Decision

# The version of the stored sample's shape.
FAIRNESS_VERSION = 1


def fairness_sample(
    snapshot: ClusterSnapshot,
    decision: Decision,
    queue: Mapping[Band, list[str]] | None = None,
    *,
    jobs_in_queue: Mapping[Band, list[str]] | None = None,
    job_counts: Mapping[int, Mapping[str, int]] | None = None,
    running: Mapping[tuple[int, str], tuple[int, int]] | None = None,
) -> dict:
    """The tick's fairness sample::

        {"version": 1, "bands": {"batch": {
            "running_value": 96,
            "users": {"alice": [running value, pending tasks, over budget 0/1, got a turn 0/1]},
            "smallest_waiting": {"job": "/bob/x", "user": "bob", "task": "/bob/x/0",
                                 "value": 6, "pending": 1, "reason": {record}} or None}}}

    Bands are listed highest first, users by name; a band appears when any user has demand in it.
    ``queue`` is ``pending_queue(decision)`` when the caller has it already, ``jobs_in_queue``
    its ``queued_jobs`` and ``job_counts`` their ``queued_job_counts``. ``running``, when given, is :func:`left_running` as the caller keeps
    it from tick to tick (``scheduler.board.publish``, from the counts of live work): then no
    pass over the snapshot's tasks, or over the jobs that run, is made.
    """
    jobs = snapshot.jobs
    # The assigned and queued tasks are counted per (band, job) first, then folded into users:
    # the per-job work (resource value, owner) once per job. The per-task passes (the queue's
    # jobs, counted) run at C speed. The running values come per (band, user) already.
    if running is None:
        running = left_running(snapshot, decision)
    placed: dict[tuple[int, str], int] = {}
    for a in decision.assignments:
        key = (int(a.band), a.task[: a.task.rfind("/")])
        placed[key] = placed.get(key, 0) + 1
    if queue is None:
        queue = pending_queue(decision)
    if jobs_in_queue is None:
        jobs_in_queue = queued_jobs(queue)
    if job_counts is None:
        job_counts = queued_job_counts(jobs_in_queue)

    # Each assigned or queued job's owner and per-task value, once per job; values once per
    # request object (the tick's job rows share one per shape: ``store.job_rows``).
    facts: dict[str, tuple[str, int]] = {}
    value_of_request: dict[int, int] = {}
    for job_id in {job_id for _, job_id in placed}.union(*job_counts.values()):
        job = jobs.get(job_id)
        if job is None:
            facts[job_id] = (job_id.split("/", 2)[1], 0)
            continue
        value = value_of_request.get(id(job.resources))
        if value is None:
            value = value_of_request[id(job.resources)] = resource_value(job.resources)
        facts[job_id] = (job.user, value)

    # (band rank, user) -> [running value, pending, over, turn]; a user running tasks worth
    # nothing still has demand.
    rows: dict[tuple[int, str], list[int]] = {key: [worth, 0, 0, 0] for key, (_, worth) in running.items()}
    for (band, job_id), n in placed.items():
        user, value = facts[job_id]
        r = rows.get((band, user))
        if r is None:
            r = rows[(band, user)] = [0, 0, 0, 0]
        r[0] += n * value
        r[3] = 1
    smallest: dict[int, tuple] = {}
    for band, per_job in job_counts.items():
        for job_id, n in per_job.items():
            user, value = facts[job_id]
            r = rows.get((band, user))
            if r is None:
                r = rows[(band, user)] = [0, 0, 0, 0]
            r[1] += n
            candidate = (value, n, job_id)
            least = smallest.get(band)
            if least is None or candidate < least:
                smallest[band] = candidate
    bands: dict[int, dict[str, list[int]]] = {}
    for (band, user), r in rows.items():
        bands.setdefault(band, {})[user] = r

    defaults = snapshot.config.budget_defaults
    spend = decision.spend
    out: dict[str, dict] = {}
    for band in sorted(bands):
        users = bands[band]
        for user, r in users.items():
            r[2] = int(is_over_budget(spend.get(user, 0), budget_limit(user, snapshot.budgets, defaults)))
        first_waiting = None
        if band in smallest:
            v, n, job_id = smallest[band]
            # The job's first queued task (a C-speed scan of the band's job ids).
            task_id = queue[Band(band)][jobs_in_queue[Band(band)].index(job_id)]
            first_waiting = {
                "job": job_id,
                "user": facts[job_id][0],
                "task": task_id,
                "value": v,
                "pending": n,
                "reason": reason_record(decision.pending_reasons[task_id]),
            }
        out[Band(band).wire] = {
            "running_value": sum(r[0] for r in users.values()),
            "users": {user: users[user] for user in sorted(users)},
            "smallest_waiting": first_waiting,
        }
    return {"version": FAIRNESS_VERSION, "bands": out}


def left_running(snapshot: ClusterSnapshot, decision: Decision) -> dict[tuple[int, str], tuple[int, int]]:
    """``{(stamped band rank, user): (tasks, their resource value)}`` of the tasks active at
    tick start that the decision leaves active (not evicted, requeued with their gang or ended
    this tick); only pairs with tasks are listed. Counted per (band, job) first, each job's
    owner and value then looked up once."""
    active = ACTIVE_STATES
    gone = {task_id for task_id, moved in decision.after.items() if moved.state not in active}
    per_job: dict[tuple[int, str], int] = {}
    get = per_job.get
    for task in snapshot.tasks:
        if task.band is not None and task.state in active and task.id not in gone:
            key = (int(task.band), task.job_id)
            per_job[key] = get(key, 0) + 1
    jobs = snapshot.jobs
    running: dict[tuple[int, str], tuple[int, int]] = {}
    for (band, job_id), n in per_job.items():
        job = jobs.get(job_id)
        user, value = (job.user, resource_value(job.resources)) if job is not None else (job_id.split("/", 2)[1], 0)
        tasks, worth = running.get((band, user), (0, 0))
        running[(band, user)] = (tasks + n, worth + n * value)
    return running


def band_rows(band: Mapping) -> list[dict]:
    """A stored band's users as rows for people: running value, share, equal share, pending,
    over budget, turn (shares as fractions of 1)."""
    users = band.get("users", {})
    total = band.get("running_value", 0)
    equal = 1 / len(users) if users else 0.0
    return [
        {
            "user": user,
            "running_value": r[0],
            "share": (r[0] / total) if total else 0.0,
            "equal_share": equal,
            "pending": r[1],
            "over_budget": bool(r[2]),
            "got_turn": bool(r[3]),
        }
        for user, r in users.items()
    ]
