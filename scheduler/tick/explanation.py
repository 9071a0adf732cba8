"""Explanation storage: a decision turned into the queue the console and the API read
(every still-pending task's band, position and reason), stored with the tick.
"""

from __future__ import annotations

from scheduler.core.budget import effective_band
from scheduler.core.types import ClusterSnapshot, Decision


def explanation_to_json(snapshot: ClusterSnapshot, decision: Decision) -> dict:
    """The queue as the console shows it: every still-pending task's band, position and reason.

    Shape: ``{"tasks": {task_id: [effective band rank, position in band (1-based), reason index]},
    "reasons": [text, ...], "band_counts": {rank: n}}``. Reasons are interned because thousands
    of tasks usually share a handful of them.
    """
    assigned = {a.task for a in decision.assignments}
    reasons: list[str] = []
    reason_index: dict[str, int] = {}
    # Reasons are shared objects (one per job or request shape): render each once.
    index_of_reason: dict[int, int] = {}
    positions: dict[int, int] = {}
    tasks: dict[str, list] = {}
    pending_reasons = decision.pending_reasons
    effective_bands = decision.effective_bands
    ordered = list(decision.order)
    seen = set(ordered)
    # Pending tasks held back by the gates are queued after the ones that passed.
    ordered.extend(t for t in pending_reasons if t not in seen)
    for task_id in ordered:
        reason = pending_reasons.get(task_id)
        if reason is None or task_id in assigned:
            continue
        band = effective_bands.get(task_id)
        if band is None:
            # Requeued this tick (a preemption victim or a gang sibling): it was not pending when
            # the tick started, so it queues next tick in its requested band, downgraded as usual.
            job = snapshot.jobs[task_id.rsplit("/", 1)[0]]
            band = effective_band(
                job.band, job.user, decision.spend, snapshot.budgets, snapshot.config.budget_defaults
            )
        band = int(band)
        position = positions[band] = positions.get(band, 0) + 1
        index = index_of_reason.get(id(reason))
        if index is None:
            text = reason_text(reason)
            index = reason_index.get(text)
            if index is None:
                index = reason_index[text] = len(reasons)
                reasons.append(text)
            index_of_reason[id(reason)] = index
        tasks[task_id] = [band, position, index]
    return {"tasks": tasks, "reasons": reasons, "band_counts": {str(k): v for k, v in sorted(positions.items())}}


def reason_text(reason: object) -> str:
    text = getattr(reason, "text", None)
    return text() if callable(text) else str(reason)
