"""What-if arithmetic over the newest tick's record: where one new job would stand in its band's
queue. Pure: the shell reads the record (``board.read.whatif_basis``) and rows.

The tick leaves, per band, its users in round-robin order with their pending task counts
(:func:`queue_counts`), and each worker's free capacity (``Decision.capacity_left``). A new
job's place follows the core's own order (``core.ordering.round_robin``): users by ascending
spend, round k takes each user's k-th task; a new job is the newest of its user, so its first
task comes after that user's pending tasks in the band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.types import JobSpec


def queue_counts(job_counts: Mapping[int, Mapping[str, int]], jobs: Mapping[str, JobSpec]) -> dict[int, list[list]]:
    """``{band rank: [[user, pending tasks], ...]}``, users in their order of first appearance
    in the band (the round robin's order), from each band's ``{job id: queued tasks}`` in the
    order the tick's queue (``core.explain.pending_queue``) first lists each job."""
    out: dict[int, list[list]] = {}
    for rank, per_job in job_counts.items():
        users: dict[str, int] = {}
        for job_id, n in per_job.items():
            job = jobs.get(job_id)
            user = job.user if job is not None else job_id.split("/", 2)[1]
            users[user] = users.get(user, 0) + n
        out[int(rank)] = [[user, n] for user, n in users.items()]
    return out


def queue_place(band_users: Sequence[Sequence], spend: Mapping[str, int], user: str, replicas: int) -> tuple[int, int]:
    """(position of the new job's first task, the band's pending count with the job added).

    ``band_users`` is the band's ``[user, count]`` list in round-robin order, ``spend`` the
    spend the order was decided with (``user``'s own may be newer). A user new to the band
    joins after every user whose spend is not above theirs (equal spend keeps first appearance,
    and this job appears last).
    """
    order = [(str(u), int(n)) for u, n in band_users]
    total = sum(n for _, n in order)
    if user not in {u for u, _ in order}:
        mine = spend.get(user, 0)
        at = next((i for i, (u, _) in enumerate(order) if spend.get(u, 0) > mine), len(order))
        order.insert(at, (user, 0))
    k = next(n for u, n in order if u == user)  # the round the new task falls in (0-based)
    position = 1 + k
    before = True
    for u, n in order:
        if u == user:
            before = False
            continue
        position += min(n, k) + (1 if before and n > k else 0)
    return position, total + replicas
