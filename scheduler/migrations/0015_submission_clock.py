"""Issue 14: submissions no longer hold one global lock until they commit.

On PostgreSQL, the submission clock (``scheduler/store/submission_order.py``):
a sequence and a function that hands out strictly increasing submission times, each at least the
given ``now`` and past every committed job's, under an advisory lock held only while it runs.
"""

from django.db import migrations

# The advisory lock key of the submission clock (scheduler.store.submission_order.CLOCK_LOCK_KEY).
CLOCK_LOCK_KEY = 0x1215_0001

CREATE = f"""
CREATE SEQUENCE IF NOT EXISTS scheduler_submission_ms MINVALUE 0 START 0;
CREATE OR REPLACE FUNCTION scheduler_next_submission_ms(now_ms bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    issued bigint;
    next_ms bigint;
BEGIN
    -- A session lock (a transaction lock would be held until the submission commits), given
    -- back on every way out, cancellation included.
    PERFORM pg_advisory_lock({CLOCK_LOCK_KEY});
    BEGIN
        issued := nextval('scheduler_submission_ms');
        next_ms := GREATEST(issued, now_ms,
                            (SELECT COALESCE(MAX(submitted_at_ms) + 1, 0) FROM scheduler_job));
        IF next_ms > issued THEN
            PERFORM setval('scheduler_submission_ms', next_ms);
        END IF;
    EXCEPTION WHEN OTHERS OR QUERY_CANCELED THEN
        PERFORM pg_advisory_unlock({CLOCK_LOCK_KEY});
        RAISE;
    END;
    PERFORM pg_advisory_unlock({CLOCK_LOCK_KEY});
    RETURN next_ms;
END
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS scheduler_next_submission_ms(bigint);
DROP SEQUENCE IF EXISTS scheduler_submission_ms;
"""


def create_clock(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(CREATE)


def drop_clock(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0014_tick_fairness"),
    ]

    operations = [
        migrations.RunPython(create_clock, drop_clock),
    ]
