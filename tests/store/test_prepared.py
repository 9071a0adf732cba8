"""The hot paths' fixed statements (``scheduler.store.prepared``): prepared on the server on
PostgreSQL (issue 26: Django's default left psycopg ignoring ``prepare=True``, so every one was
parsed and planned again), and the same rows either way."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler.store import prepared

pytestmark = pytest.mark.django_db


def test_a_fixed_statement_answers_its_rows_and_a_write_without_rows_none():
    assert prepared.fetch("SELECT 1 + %s", [1]) == [(2,)]
    assert prepared.fetch_one("SELECT 1 + %s", [2]) == (3,)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE prepared_probe (n integer)")
    assert prepared.fetch("INSERT INTO prepared_probe (n) VALUES (%s)", [7]) == []
    assert prepared.fetch("SELECT n FROM prepared_probe WHERE n > %s", [100]) == []
    assert prepared.fetch_one("SELECT n FROM prepared_probe WHERE n > %s", [100]) is None


@pytest.mark.postgres
def test_on_postgresql_a_fixed_statement_is_prepared_on_the_server_once():
    for value in (1, 2, 3):
        assert prepared.fetch("SELECT %s::integer * 10", [value]) == [(value * 10,)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement = %s", ["SELECT $1::integer * 10"])
        assert cursor.fetchone()[0] == 1


@pytest.mark.postgres
def test_on_postgresql_the_orms_own_statements_are_not_prepared():
    """Only the statements that ask are prepared: Django's cursors bind on the client."""
    from scheduler.models import Job

    def prepared_texts() -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%scheduler_job%"])
            return {text for (text,) in cursor.fetchall()}

    # The session's own fixed statements (store.libpq's, which outlive a test) may be there already.
    before = prepared_texts()
    for _ in range(3):
        list(Job.objects.filter(name="/nobody/none"))
    assert prepared_texts() == before


def test_a_statement_after_another_answers_its_own_first_row():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE prepared_after (n integer)")
    first = ("INSERT INTO prepared_after (n) VALUES (%s)", [5])
    assert prepared.fetch_one_after(first, "SELECT count(*), max(n) FROM prepared_after WHERE n > %s", [1]) == (1, 5)
    assert prepared.fetch_one_after(first, "SELECT n FROM prepared_after WHERE n > %s", [100]) is None


@pytest.mark.postgres
def test_on_postgresql_a_lock_sent_with_the_reads_after_it_is_held_when_they_answer():
    """The submission's pipeline (BEGIN, the identity's lock, the rule reads): the lock is this
    transaction's when the reads answer, and both statements are prepared."""
    from django.db import transaction

    from scheduler.store.locks import lock_statement

    def held() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            return cursor.fetchone()[0]

    with transaction.atomic():
        assert prepared.fetch_one_after(lock_statement("submissions:probe"), "SELECT %s::integer + 1", [41]) == (42,)
        assert held() == 1
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%pg_advisory_xact_lock%"]
            )
            assert cursor.fetchone()[0] == 1


def test_a_statement_and_commit_inside_a_callers_transaction_commits_nothing():
    """Inside a nested block (here the test's own transaction) the statement runs alone: what
    it wrote is the enclosing transaction's to keep or roll back."""
    from django.db import transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE prepared_nested (n integer)")
    with transaction.atomic():
        assert prepared.fetch_one_and_commit("INSERT INTO prepared_nested (n) VALUES (%s) RETURNING n", [3]) == (3,)
        assert connection.in_atomic_block
    try:
        with transaction.atomic():
            prepared.fetch_one_and_commit("INSERT INTO prepared_nested (n) VALUES (%s)", [4])
            raise RuntimeError("the caller rolls back")
    except RuntimeError:
        pass
    assert prepared.fetch("SELECT n FROM prepared_nested") == [(3,)]


@pytest.fixture
def probe_table():
    """A table of unique numbers on its own session, outside any test transaction."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE prepared_commit (n integer UNIQUE)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE prepared_commit")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_outermost_blocks_last_statement_carries_its_commit(probe_table):
    """Issue 26: the write and the COMMIT in one round trip. The transaction has ended when the
    statement answers; Django's commit on leaving the block sends nothing, and its on_commit
    hooks still run after it."""
    from django.db import transaction
    from psycopg.pq import TransactionStatus

    hooks = []
    with transaction.atomic():
        prepared.fetch("INSERT INTO prepared_commit (n) VALUES (%s)", [1])
        assert prepared.fetch_one_and_commit("INSERT INTO prepared_commit (n) VALUES (%s) RETURNING n", [2]) == (2,)
        assert connection.connection.pgconn.transaction_status == TransactionStatus.IDLE
        transaction.on_commit(lambda: hooks.append("ran"))
    assert hooks == ["ran"]
    assert prepared.fetch("SELECT n FROM prepared_commit ORDER BY n") == [(1,), (2,)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_failing_last_statement_commits_nothing_of_its_transaction(probe_table):
    """A unique violation in the statement: the COMMIT sent with it is skipped, the error is
    Django's IntegrityError, and the block rolls back everything it wrote (no partial writes)."""
    from django.db import IntegrityError, transaction

    prepared.fetch("INSERT INTO prepared_commit (n) VALUES (%s)", [9])
    hooks = []
    with pytest.raises(IntegrityError), transaction.atomic():
        prepared.fetch("INSERT INTO prepared_commit (n) VALUES (%s)", [10])
        transaction.on_commit(lambda: hooks.append("ran"))
        prepared.fetch_one_and_commit("INSERT INTO prepared_commit (n) VALUES (%s)", [9])
    assert hooks == []
    assert prepared.fetch("SELECT n FROM prepared_commit ORDER BY n") == [(9,)]
    with transaction.atomic():  # the connection is usable again
        assert prepared.fetch_one_and_commit("INSERT INTO prepared_commit (n) VALUES (%s) RETURNING n", [11]) == (11,)
    assert prepared.fetch("SELECT n FROM prepared_commit ORDER BY n") == [(9,), (11,)]


@pytest.mark.postgres
def test_on_postgresql_the_statements_go_on_libpq_and_psycopg_prepares_nothing_itself():
    """Issue 26, web38: the statements are prepared by ``store.libpq`` under its own names, so
    psycopg's own cache stays empty (and never sends its DEALLOCATE ALL on a rollback, which
    would drop them)."""
    for value in (1, 2):
        assert prepared.fetch("SELECT %s::integer * 7", [value]) == [(value * 7,)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s", ["SELECT $1::integer * 7"])
        [(name,)] = cursor.fetchall()
    assert name.startswith("iris_")
    assert not connection.connection._prepared._names


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_without_psycopgs_private_names_the_statements_take_its_cursors(monkeypatch):
    """``store.libpq`` leans on two private names of psycopg 3.3; should a release move them,
    the same statements go through psycopg's cursors (prepared by psycopg), with the same rows."""
    from scheduler.store import libpq

    monkeypatch.setattr(libpq, "PRIVATE_NAMES_FOUND", False)
    try:
        connection.ensure_connection()
        assert libpq.session(connection.connection) is None
        for value in (1, 2, 3):
            assert prepared.fetch("SELECT %s::integer * 13", [value]) == [(value * 13,)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s", ["SELECT $1::integer * 13"])
            names = [name for (name,) in cursor.fetchall()]
        assert names and not any(name.startswith("iris_") for name in names)
    finally:
        # psycopg's own cache is no longer empty: its next ROLLBACK would send DEALLOCATE ALL and
        # take store.libpq's statements with it. The other tests get a connection of their own.
        connection.close()


@pytest.mark.postgres
def test_on_postgresql_a_value_that_cannot_be_sent_sends_nothing_and_the_connection_goes_on():
    with pytest.raises(Exception) as raised:
        prepared.fetch("SELECT %s::text", [object()])
    assert "adapt" in str(raised.value).lower()
    with pytest.raises(Exception, match="placeholders"):
        prepared.fetch("SELECT %s::integer + %s::integer", [1])
    assert prepared.fetch_one("SELECT %s::integer + 1", [1]) == (2,)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_an_error_in_a_pipeline_is_raised_after_it_and_the_statements_stay_prepared(probe_table):
    """A failing statement ahead of others in one round trip: the first error is raised (as
    Django's error), the rest were skipped by the server, the connection is usable after the
    rollback, and the statements prepared before still run by name."""
    from django.db import IntegrityError, transaction

    prepared.fetch("INSERT INTO prepared_commit (n) VALUES (%s)", [1])
    with pytest.raises(IntegrityError), transaction.atomic():
        prepared.fetch_one_after(("INSERT INTO prepared_commit (n) VALUES (%s)", [1]), "SELECT %s::integer", [5])
    assert prepared.fetch("SELECT n FROM prepared_commit ORDER BY n") == [(1,)]
    with transaction.atomic():
        assert prepared.fetch_one_after(
            ("INSERT INTO prepared_commit (n) VALUES (%s)", [2]), "SELECT %s::integer", [5]
        ) == (5,)
    assert prepared.fetch("SELECT n FROM prepared_commit ORDER BY n") == [(1,), (2,)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%prepared_commit (n)%"])
        assert cursor.fetchone()[0] == 1
