"""Issue 26: a batch of submissions reserves its consecutive submission times in one call.

``scheduler_next_submission_ms(now_ms, n)`` hands out the first of ``n`` times exactly as ``n``
calls of the one-argument function (migration 0015) would, under the same advisory lock held
only while it runs (``scheduler/store/submission_order.next_submission_times``).
"""

from django.db import migrations

# The advisory lock key of the submission clock (scheduler.store.submission_order.CLOCK_LOCK_KEY).
CLOCK_LOCK_KEY = 0x1215_0001

CREATE = f"""
CREATE OR REPLACE FUNCTION scheduler_next_submission_ms(now_ms bigint, n bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    issued bigint;
    next_ms bigint;
BEGIN
    PERFORM pg_advisory_lock({CLOCK_LOCK_KEY});
    BEGIN
        issued := nextval('scheduler_submission_ms');
        next_ms := GREATEST(issued, now_ms,
                            (SELECT COALESCE(MAX(submitted_at_ms) + 1, 0) FROM scheduler_job));
        -- The sequence remembers the last of the n times, so the next call starts after it.
        IF next_ms + n - 1 > issued THEN
            PERFORM setval('scheduler_submission_ms', next_ms + n - 1);
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

DROP = "DROP FUNCTION IF EXISTS scheduler_next_submission_ms(bigint, bigint);"


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
        ("scheduler", "0018_tick_explanation_reference"),
    ]

    operations = [
        migrations.RunPython(create_clock, drop_clock),
    ]
