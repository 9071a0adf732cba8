"""The tick's one publishing step: what readers see of a decision, written with the tick record.

A publication is the queue explanation with the tick's counts of live work
(:func:`scheduler.board.formats.explanation_to_json`, :func:`scheduler.board.counts.active_counts`),
the what-if basis (:func:`scheduler.board.formats.whatif_basis_to_json`) and the fairness sample
(:func:`scheduler.core.fairness.fairness_sample`). All are functions of the snapshot (less its
clock), the decision and the changes the tick kept, so a tick whose decision is the previous
tick's very object (reused: ``scheduler.core.reuse``) publishes nothing new: its record names the
record that holds the previous publication (``TickRecord.explanation_tick``) while that record
still holds it, and stores the kept bytes again only if it no longer does.

The tick drives it in three steps inside its transaction (:func:`begin`, then
:meth:`Publication.build` while its last writes run, then :meth:`Publication.finish`); the
publication is kept for the next tick only once the transaction commits.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain, filterfalse
from typing import Any

from django.db import connection, transaction

from scheduler.board import formats
from scheduler.board.counts import LiveCounts, active_counts, task_keys
from scheduler.board.formats import explanation_to_json, whatif_basis_to_json
from scheduler.core.explain import pending_queue, queued_job_counts, queued_jobs
from scheduler.core.fairness import fairness_sample
from scheduler.core.bands import Band
from scheduler.core.kueue import KueueInput
from scheduler.core.types import ClusterSnapshot, Decision, TaskAfter, TaskSnapshot, TaskState
from scheduler.models import TickRecord, compress_json
from scheduler.store.prepared import fetch
from scheduler.store.cluster_rows import task_changes


@dataclass(frozen=True, slots=True)
class Published:
    """What this process's newest tick published for its decision: the fairness sample, the
    queue explanation and the what-if basis (compressed, as ``CompressedJSONField`` stores
    them), the queue's length, the core's pending count, and ``tick_pk``, the record holding
    the explanation and basis."""

    decision: Decision
    fairness: dict
    explanation: bytes
    whatif_basis: bytes
    left_pending: int
    tick_pk: int
    pending: int


# Read and replaced whole, never mutated; per process, like the decision it belongs to.
_published: Published | None = None

PENDING = TaskState.PENDING


def forget() -> None:
    """Build the publication and count the live work afresh at the next tick (with
    ``forget_decision``), the what-if basis's kept worker and holder columns with them (a web
    process that ran a tick for an operator keeps none of it)."""
    global _published, _live, _job_of
    _published = None
    _live = None
    _job_of = {}
    formats.forget()


# Task id -> its job's id, as ``queued_jobs`` splits it, for the tasks the newest ticks queued. A
# task's job is in its id, so an entry never goes stale: a tick splits only the ids it has not
# seen (its arrivals and requeues; ~400 of ~20,000 in a prompt tick) and looks the rest up. Once
# the map holds more than twice the queue (the tasks that left it), it is rebuilt from the queue.
_job_of: dict[str, str] = {}


def jobs_in(queue: Mapping[Band, list[str]]) -> dict[Band, list[str]]:
    """``queued_jobs(queue)``, the ids split once per task and process (``_job_of``)."""
    global _job_of
    job_of = _job_of
    seen = job_of.__contains__
    unseen = {band: new for band, task_ids in queue.items() if (new := list(filterfalse(seen, task_ids)))}
    if unseen:
        for band, job_ids in queued_jobs(unseen).items():
            job_of.update(zip(unseen[band], job_ids))
    job_at = job_of.__getitem__
    jobs = {band: list(map(job_at, task_ids)) for band, task_ids in queue.items()}
    if len(job_of) > 2 * sum(map(len, queue.values())) + 1024:
        _job_of = dict(zip(chain.from_iterable(queue.values()), chain.from_iterable(jobs.values())))
    return jobs


class Publication:
    """One tick's publication, from :func:`begin` to :meth:`finish`."""

    def __init__(self, snapshot: ClusterSnapshot, decision: Decision, kueue: KueueInput, rows: TaskRows) -> None:
        self.snapshot, self.decision, self.kueue, self.rows = snapshot, decision, kueue, rows
        # The same decision object as the previous tick's: what it published is this tick's too.
        self.kept = _published if _published is not None and _published.decision is decision else None
        # The record holding this tick's queue and basis when it is an earlier one: the kept
        # publication's record, if it still holds them (always, but for another tick process
        # having published since; then this tick writes the kept bytes itself).
        self.holder: int | None = None
        if self.kept is not None:
            holders = list(TickRecord.objects.filter(explanation__isnull=False).values_list("pk", flat=True)[:2])
            if holders == [self.kept.tick_pk]:
                self.holder = self.kept.tick_pk
        # The counts of live work at the tick's start (None: counted over every task in
        # ``build``), from the previous tick's counts and the rows' change log.
        self.counts = self.start_counts() if self.kept is None else None
        # A reused decision was made over the same tasks: the same count (no pass over them).
        if self.kept is not None:
            self.core_pending = self.kept.pending
        elif self.counts is not None:
            self.core_pending = sum(counts[0] for counts in self.counts.by_user.values())
        else:
            self.core_pending = sum(1 for t in snapshot.tasks if t.state is PENDING)
        # The queue the tick leaves, each queued task's job and each job's queued tasks,
        # computed once for the fairness sample, the explanation and the what-if basis.
        self.queue = pending_queue(decision) if self.kept is None else None
        self.jobs_in_queue = jobs_in(self.queue) if self.queue is not None else None
        self.job_counts = queued_job_counts(self.jobs_in_queue) if self.jobs_in_queue is not None else None
        self.built: Published | None = self.kept

    def record_fields(self) -> dict:
        """The tick record's fields known before the tick writes anything."""
        if self.kept is not None:
            fairness = self.kept.fairness
        else:
            running = self.counts.left_running(self.decision) if self.counts is not None else None
            fairness = fairness_sample(
                self.snapshot,
                self.decision,
                self.queue,
                jobs_in_queue=self.jobs_in_queue,
                job_counts=self.job_counts,
                running=running,
            )
        return {
            "explanation_tick_id": self.holder,
            "pending": self.core_pending + len(self.kueue.pending),
            "fairness": fairness,
        }

    def build(self, kept_changes: Collection[str], tick_pk: int, fairness: dict) -> None:
        """Build the publication for the tick's kept changes (nothing when it reuses the last)."""
        if self.built is not None:
            return
        explanation = explanation_to_json(
            self.snapshot, self.decision, self.queue, jobs_in_queue=self.jobs_in_queue, job_counts=self.job_counts
        )
        # The counts of live work, stored with the queue they are shown beside, and who holds
        # each worker, for the what-if basis.
        explanation["active"], holders = self.live_counts(kept_changes)
        basis = whatif_basis_to_json(self.snapshot, self.decision, self.job_counts, holders)
        self.built = Published(
            decision=self.decision,
            fairness=fairness,
            explanation=compress_json(explanation),
            whatif_basis=compress_json(basis),
            left_pending=sum(map(len, self.queue.values())),
            tick_pk=tick_pk,
            pending=self.core_pending,
        )

    def counts_kept(self) -> bool:
        """Whether the counts of live work are kept between ticks: on PostgreSQL with no work
        routed to Kubernetes (see ``start_counts``)."""
        kueue = self.kueue
        routed = bool(kueue.jobs or kueue.pending or kueue.active or kueue.worker is not None)
        return not routed and connection.vendor == "postgresql"

    def start_counts(self) -> LiveCounts | None:
        """The previous tick's counts of live work updated with the tasks that changed since
        (the rows' change log): the counts over the snapshot, when this process's previous
        tick left counts that still hold; else None (``live_counts`` counts every task). On
        SQLite (which reads the cluster whole every tick, so there is nothing to update from)
        and with work routed to Kubernetes (its tasks' workers are the core's, not the rows')
        nothing is kept: None."""
        global _live
        kept = _live
        # Whatever happens next, the kept counts hold again only once a tick commits.
        _live = None
        if not self.counts_kept() or kept is None or not kept.confirmed:
            return None
        changed = task_changes(kept.mark, self.rows.changes)
        if changed is None:
            return None
        counts = kept.counts
        task_rows, task_snapshots = self.rows.task_rows, self.rows.task_snapshots
        ids = list(dict.fromkeys(changed))
        if kept.written is not None:
            ids = _rewritten_unchanged(ids, kept.written, task_rows, task_snapshots)
        tasks = [task_snapshots.get(row.pk) if (row := task_rows.get(task_id)) is not None else None for task_id in ids]
        job_ids = [task.job_id if task is not None else "" for task in tasks]
        counts.set_all(zip(ids, task_keys(self.snapshot.jobs.__getitem__, job_ids, tasks)))
        return counts

    def live_counts(self, kept_changes: Collection[str]) -> tuple[dict, dict[str, dict[tuple, int]]]:
        """The counts of live work after this tick's writes, and who holds each worker: the
        counts at the tick's start (``start_counts``) with this tick's kept changes set, or,
        without them, counted over every task (and kept for the next tick on PostgreSQL when
        no work is routed to Kubernetes; see ``start_counts``)."""
        global _live
        snapshot, kueue, after = self.snapshot, self.kueue, self.decision.after
        jobs = snapshot.jobs
        if not self.counts_kept():
            holders: dict[str, dict[tuple, int]] = {}
            return active_counts(snapshot, self.decision, kept_changes, kueue, per_worker=holders), holders
        counts = self.counts
        if counts is None:
            counts = LiveCounts.of_tasks(
                (*snapshot.tasks, *kueue.pending),
                lambda job_id: jobs.get(job_id) or kueue.jobs[job_id],
                after,
                set(kept_changes),
            )
        else:
            ids = list(kept_changes)
            job_ids = [task_id[: task_id.rfind("/")] for task_id in ids]
            counts.set_all(zip(ids, task_keys(jobs.__getitem__, job_ids, [after[task_id] for task_id in ids])))
        # Confirmed once the tick commits; a tick that rolls back leaves counts nobody trusts.
        _live = KeptCounts(
            counts,
            self.rows.changes,
            confirmed=False,
            counted="all" if self.counts is None else "changes",
            written=(kept_changes, after),
        )
        transaction.on_commit(partial(_confirm, _live))
        return counts.published()

    def finish(self, tick_pk: int) -> dict:
        """The tick record's publication fields, with older records' publications cleared (only
        the newest holder keeps the large parts); kept for the next tick once committed."""
        built = self.built
        assert built is not None, "build() first"
        fields: dict = {"left_pending": built.left_pending}
        if self.holder is None:
            if connection.vendor == "postgresql":
                # One statement sets this record's and clears the older ones', the bytes bound
                # on the server (binary): Django's client-side binding would escape them into
                # the statement's text (~250 KB of hex at 20,000 pending) for the server to parse
                # back, ~1 ms of this process's CPU and ~1 ms of the server's a tick.
                fetch(_WRITE_PUBLICATION, (tick_pk, built.explanation, tick_pk, built.whatif_basis, tick_pk, tick_pk))
            else:
                TickRecord.objects.filter(explanation__isnull=False, pk__lt=tick_pk).update(
                    explanation=None, whatif_basis=None
                )
                fields.update(explanation=built.explanation, whatif_basis=built.whatif_basis)
            if built.tick_pk != tick_pk:
                built = replace(built, tick_pk=tick_pk)
        transaction.on_commit(partial(_keep, built))
        return fields


# The publication's write on PostgreSQL (``Publication.finish``): the tick record ``id`` gets the
# queue and the basis, and every older record holding them lets them go.
_WRITE_PUBLICATION = (
    f"UPDATE {TickRecord._meta.db_table} SET explanation = CASE WHEN id = %s THEN %s::bytea END, "
    "whatif_basis = CASE WHEN id = %s THEN %s::bytea END WHERE id = %s OR (explanation IS NOT NULL AND id < %s)"
)


@dataclass(frozen=True, slots=True)
class TaskRows:
    """The rows the tick's snapshot came from: task id -> row (``TaskRow``, for its pk), task
    pk -> snapshot, and where the rows' change log stood (``ClusterView.changes``)."""

    task_rows: Mapping[str, Any]
    task_snapshots: Mapping[int, TaskSnapshot]
    changes: tuple[int, int]


@dataclass(slots=True)
class KeptCounts:
    """This process's newest counts of live work, where the change log stood when they were
    counted, whether the tick that counted them committed, and how they were counted."""

    counts: LiveCounts
    mark: tuple[int, int]
    confirmed: bool
    counted: str = "all"  # "changes": updated from the change log; "all": counted over every task
    # The tick's kept changes, as set in the counts: (their task ids, the decision's ``after``).
    written: tuple[Collection[str], Mapping[str, TaskAfter]] | None = None


def _rewritten_unchanged(
    ids: list[str],
    written: tuple[Collection[str], Mapping[str, TaskAfter]],
    task_rows: Mapping[str, Any],
    task_snapshots: Mapping[int, TaskSnapshot],
) -> list[str]:
    """``ids`` less the tasks the counts' previous tick wrote (``written``) that the snapshot
    has as written: the change log lists every task that tick wrote, read back, and its part
    in the counts was set from the same state, band and worker (``task_key`` of each is the
    same), so setting it again would change nothing. Compared field by field, without building
    either part (most of a tick's change log is such tasks: the previous tick's writes)."""
    kept, after = written
    rest = []
    append = rest.append
    for task_id in ids:
        if task_id in kept:
            row = task_rows.get(task_id)
            if row is not None:
                task = task_snapshots.get(row.pk)
                now = after[task_id]
                if task is not None and task.state is now.state and task.band is now.band and task.worker == now.worker:
                    continue
        append(task_id)
    return rest


_live: KeptCounts | None = None


def _confirm(kept: KeptCounts) -> None:
    kept.confirmed = True


def begin(snapshot: ClusterSnapshot, decision: Decision, kueue: KueueInput, rows: TaskRows) -> Publication:
    """Start this tick's publication (inside the tick's transaction)."""
    return Publication(snapshot, decision, kueue, rows)


def _keep(published: Published) -> None:
    global _published
    _published = published
