"""JSON <-> core types: the snapshot ``simulate`` reads and the decision it prints.

The formats are those of docs/snapshot-format.md (all keys lower-case; bands and states by their
lower-case names). ``snapshot_from_json`` validates everything and raises :class:`SnapshotError`
whose message starts with the JSON path of the offending field, e.g.
``jobs[3].resources.device.count: expected a non-negative integer``.

Defaults when a field is omitted: config keys as in :class:`SchedulerConfig`; a worker is
healthy with no attributes and a CPU device. For a job, only ``id`` is required: ``user`` is the
first segment of its id, ``band`` its parent's (interactive for a root), ``parent`` derived
from the id (checked if given), ``submitted_at_ms`` 0 (ties then break by job id),
``root_submitted_at_ms`` the root job's ``submitted_at_ms`` (its own if the root is not in the
snapshot), one replica, no resources, no coscheduling, no constraints, no deadline, 100
preemption retries and 0 failure retries. A task that is not listed is PENDING with no
history. An accelerator's ``variant`` may be null (unknown for a worker; any variant for a job,
like ``auto``). Unknown keys are rejected, except a top-level ``description``. The optional
``scale_groups`` list (TPU scale groups, read only by the explanations) is written only when
it is not empty.

``snapshot_to_json`` writes every field explicitly and leaves out only tasks that are PENDING
with no history; ``snapshot_from_json(snapshot_to_json(s)) == s`` for a snapshot that lists every
task of its jobs in job and index order (as ``snapshot_from_json`` builds them). A snapshot
that omits finished tasks (as the shell's does) is written with those tasks as ``succeeded``:
the decision treats every finished state alike, so it decides the same.

Key order is deterministic: the snapshot keeps its input order; in a decision, maps keyed by
task are sorted by (job id, task index), users and jobs by name.
"""

from scheduler.core.wire.read import SnapshotError, snapshot_from_json
from scheduler.core.wire.write import decision_to_json, snapshot_to_json, task_sort_key

__all__ = ["SnapshotError", "decision_to_json", "snapshot_from_json", "snapshot_to_json", "task_sort_key"]
