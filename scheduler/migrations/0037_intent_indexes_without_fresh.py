"""On PostgreSQL, the outbox's (state, next_try_at) and (worker, state) indexes leave out the
never-tried intents (issue 23, branch writes35).

Every intent a tick writes is never tried: a START per placement, a STOP per preemption, state
pending and no retry time. Each went into five indexes (primary key, the unique (task, attempt,
kind), ``intent_fresh``, and these two): 6 WAL records an intent, 179,000 for a first tick's
29,558. No reader of these two asks for a never-tried intent: those come from ``intent_fresh``
(a drain's due read, migration 0036). Their readers ask for intents due again (``state =
'pending' AND next_try_at <= now``), a worker's delivered mailbox (``worker_id = ... AND state =
'delivered'``), the held STARTs to wake (``next_try_at IS NOT NULL``) and the failed ones
(``state = 'failed'``): each implies ``NOT (state = 'pending' AND next_try_at IS NULL)``, which
PostgreSQL's planner proves, so each still reads its index (docs/benchmarks.md, section
writes35). So a tick's intent writes 3 index entries instead of 5; a drain's delivery, an update
of ``state`` that was never heap-only, writes the same entries it wrote before.

PostgreSQL only, as the fillfactor of 0026 and the triggers of 0031: SQLite's planner uses a
partial index only where the query repeats the index's condition, so there the mailbox and the
failed intents' reads would scan the outbox. The indexes keep their names and columns (the
models' state is unchanged); only their condition differs on PostgreSQL.
"""

from django.db import migrations

TABLE = "scheduler_dispatchintent"
# (name, columns) of the model's two indexes (migration 0001's names).
INDEXES = (
    ("scheduler_d_state_1a0c6d_idx", '"state", "next_try_at"'),
    ("scheduler_d_worker__c0ab62_idx", '"worker_id", "state"'),
)
NOT_FRESH = 'NOT ("next_try_at" IS NULL AND "state" = \'pending\')'


def statements(partial: bool) -> list[str]:
    out = []
    for name, columns in INDEXES:
        condition = f" WHERE {NOT_FRESH}" if partial else ""
        out += [f'DROP INDEX "{name}"', f'CREATE INDEX "{name}" ON "{TABLE}" ({columns}){condition}']
    return out


def run(partial: bool):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements(partial):
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0036_intent_fresh_index")]

    operations = [migrations.RunPython(run(partial=True), run(partial=False))]
