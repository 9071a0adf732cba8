"""Submitting jobs: ids and ownership, the band rules, limits, validation, and atomicity."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from scheduler.budgets.writes import approve_uplift, request_uplift
from scheduler.core.bands import Band
from scheduler.foundation.errors import FailedPrecondition
from scheduler.jobs.cancel import cancel_job
from scheduler.jobs.submit import request_prompt_tick, submit_job
from scheduler.models import AuditEntry, Job, Task, UserBudget
from scheduler.store.clock import now_ms
from tests.api.conftest import error_of
from tests.personas import GIB, make_worker, run_tasks, submit

JOBS = "/api/v1/jobs/"
MAX_BAND_MESSAGE = (
    "Budget identity 'alice' cannot submit INTERACTIVE jobs (max band: BATCH). Use --priority batch, "
    "check that you are signed in as the right user, or request an uplift."
)


def post(client, body):
    """Submit ``body``; a command is required, so one is added when the test does not care."""
    return client.post(JOBS, {"command": ["true"], **body} if isinstance(body, dict) else body, format="json")


def rejected(response, status: int, code: str, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = error_of(response)
    assert body["code"] == code
    if field is not None:
        assert body["details"].get("field") == field, body
        assert field in body["message"], body
    return body


# --- ids and ownership ----------------------------------------------------------------------------


def test_root_without_priority_is_interactive_under_the_callers_name(as_alice):
    response = post(as_alice, {"name": "train"})
    assert response.status_code == 201
    job = response.json()
    assert job["id"] == "/alice/train"
    assert job["band"] == "interactive"
    assert job["user"] == "alice"
    assert job["depth"] == 1
    assert job["submitted_by"] == "alice"


def test_full_root_id_under_own_name_is_accepted(as_alice):
    assert post(as_alice, {"name": "/alice/train"}).json()["id"] == "/alice/train"


def test_root_id_naming_another_user_is_permission_denied(as_alice):
    rejected(post(as_alice, {"name": "/bob/train"}), 403, "PERMISSION_DENIED", "name")
    assert not Job.objects.exists()


def test_admin_may_submit_under_another_name_and_it_bills_there(as_ada):
    job = post(as_ada, {"name": "/alice/train"}).json()
    assert (job["id"], job["user"], job["submitted_by"]) == ("/alice/train", "alice", "ada")


def test_child_inherits_the_parents_stored_band_and_root_time(as_alice, alice):
    parent = submit(alice, "train", priority="batch")
    response = post(as_alice, {"name": "eval", "parent": "alice/train"})
    assert response.status_code == 201
    child = Job.objects.get(name="/alice/train/eval")
    assert child.band == Band.BATCH
    assert child.depth == 2
    assert child.parent == parent
    assert child.root_submitted_at_ms == parent.root_submitted_at_ms
    assert child.submitted_at_ms > parent.submitted_at_ms


def test_full_id_with_more_segments_creates_a_child(as_alice, alice):
    submit(alice, "train")
    assert post(as_alice, {"name": "/alice/train/eval"}).json()["parent"] == "/alice/train"


def test_child_added_by_an_admin_bills_to_the_root_submitter(as_ada, alice):
    submit(alice, "train")
    child = post(as_ada, {"name": "eval", "parent": "/alice/train"}).json()
    assert (child["user"], child["submitted_by"]) == ("alice", "ada")


def test_child_of_someone_elses_job_is_permission_denied(as_bob, alice):
    submit(alice, "train")
    rejected(post(as_bob, {"name": "eval", "parent": "alice/train"}), 403, "PERMISSION_DENIED", "parent")


def test_child_of_a_finished_job_is_failed_precondition(as_alice, alice):
    submit(alice, "train")
    cancel_job(alice, "/alice/train")
    rejected(post(as_alice, {"name": "eval", "parent": "alice/train"}), 409, "FAILED_PRECONDITION", "parent")


def test_child_of_a_missing_job_is_not_found(as_alice):
    rejected(post(as_alice, {"name": "eval", "parent": "alice/nothing"}), 404, "NOT_FOUND", "parent")


def test_an_existing_job_id_is_failed_precondition(as_alice, alice):
    submit(alice, "train")
    rejected(post(as_alice, {"name": "train"}), 409, "FAILED_PRECONDITION", "name")


# --- bands ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["alice", "olivia"])
@pytest.mark.parametrize("band", ["system", "production"])
def test_admin_bands_are_permission_denied_to_everyone_else(clients, persona, band):
    body = rejected(
        post(clients[persona], {"name": "x", "priority": band, "system_reason": "hero run"}),
        403,
        "PERMISSION_DENIED",
        "priority",
    )
    assert band.upper() in body["message"]


def test_admin_may_submit_production(as_ada):
    assert post(as_ada, {"name": "serve", "priority": "production"}).json()["band"] == "production"


@pytest.mark.parametrize("reason", ["hero run; commit=abc", "Finelog backfill", "IRIS controller upgrade", "the-hero"])
def test_system_accepts_a_reason_naming_hero_finelog_or_iris(as_ada, reason):
    response = post(as_ada, {"name": "hero", "priority": "system", "system_reason": reason})
    assert response.status_code == 201, response.content
    assert response.json()["band"] == "system"


@pytest.mark.parametrize("reason", ["", "superhero", "heroic effort", "irises", "urgent"])
def test_system_without_such_a_reason_is_invalid_argument(as_ada, reason):
    rejected(
        post(as_ada, {"name": "hero", "priority": "system", "system_reason": reason}),
        400,
        "INVALID_ARGUMENT",
        "system_reason",
    )


def test_system_reason_is_kept_in_the_stored_argv(as_ada):
    post(
        as_ada,
        {
            "name": "hero",
            "priority": "system",
            "system_reason": "hero run; commit=abc",
            "argv": ["iris", "job", "run", "--", "python", "hero.py"],
        },
    )
    job = Job.objects.get(name="/ada/hero")
    assert job.system_reason == "hero run; commit=abc"
    assert job.submission_argv[-2:] == ["--system-reason", "hero run; commit=abc"]
    assert job.submission_argv[:3] == ["iris", "job", "run"]


@pytest.fixture
def alice_max_batch(alice):
    UserBudget.objects.create(user_id="alice", budget_limit=1000, max_band=Band.BATCH)


@pytest.mark.parametrize("body", [{"name": "x", "priority": "interactive"}, {"name": "x"}], ids=["explicit", "omitted"])
def test_interactive_above_max_band_is_refused_with_what_to_do(as_alice, alice_max_batch, body):
    error = rejected(post(as_alice, body), 403, "PERMISSION_DENIED", "priority")
    assert error["message"] == MAX_BAND_MESSAGE
    assert not Job.objects.exists()


def test_batch_within_max_band_is_accepted(as_alice, alice_max_batch):
    assert post(as_alice, {"name": "x", "priority": "batch"}).json()["band"] == "batch"


def test_an_approved_uplift_of_max_band_allows_interactive(as_alice, alice, ada, alice_max_batch):
    grant = request_uplift(alice, max_band="interactive", reason="demo", duration_seconds=3600)
    approve_uplift(ada, grant.pk)
    assert post(as_alice, {"name": "x"}).json()["band"] == "interactive"


def test_over_budget_never_rejects_and_never_downgrades_at_submission(as_alice, alice):
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    running = submit(alice, "running", cpu=8, memory="64Gi")
    run_tasks(running, make_worker())
    response = post(as_alice, {"name": "more"})
    assert response.status_code == 201
    assert response.json()["band"] == "interactive"


# --- limits ---------------------------------------------------------------------------------------


def test_replicas_above_the_per_job_limit_are_resource_exhausted_with_a_status_clients_do_not_retry(as_alice, settings):
    """429 is the status clients retry on; the same request can never be within this limit, so
    it is a 422 (the code stays RESOURCE_EXHAUSTED, which the CLI and scripts match on)."""
    settings.MAX_REPLICAS_PER_JOB = 5
    rejected(post(as_alice, {"name": "big", "replicas": 6}), 422, "RESOURCE_EXHAUSTED", "replicas")
    assert post(as_alice, {"name": "ok", "replicas": 5}).status_code == 201


def test_active_tasks_above_the_per_user_limit_are_resource_exhausted(as_alice, as_bob, alice, ada, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 10
    submit(alice, "first", replicas=6)
    submit_job(ada, {"command": ["true"], "name": "child", "parent": "/alice/first", "replicas": 2})  # bills to alice
    body = rejected(post(as_alice, {"name": "more", "replicas": 3}), 429, "RESOURCE_EXHAUSTED", "replicas")
    assert body["details"]["active_tasks"] == 8
    assert post(as_alice, {"name": "fits", "replicas": 2}).status_code == 201
    assert post(as_bob, {"name": "other", "replicas": 10}).status_code == 201  # per user


def test_finished_tasks_do_not_count_towards_the_active_limit(as_alice, alice, settings):
    settings.MAX_ACTIVE_TASKS_PER_USER = 4
    submit(alice, "done", replicas=4)
    cancel_job(alice, "/alice/done")
    assert post(as_alice, {"name": "next", "replicas": 4}).status_code == 201


def test_a_live_jobs_finished_tasks_do_not_count_towards_the_active_limit(as_alice, alice, settings):
    # The live jobs' replicas (5 + 9) would exceed the cap; their unfinished tasks (1 + 9) do not.
    settings.MAX_ACTIVE_TASKS_PER_USER = 10
    submit(alice, "wide", replicas=5)
    Task.objects.filter(job__name="/alice/wide", index__lt=4).update(state="succeeded")
    assert Job.objects.get(name="/alice/wide").finished_state is None
    assert post(as_alice, {"name": "fits", "replicas": 9}).status_code == 201
    body = rejected(post(as_alice, {"name": "over", "replicas": 1}), 429, "RESOURCE_EXHAUSTED", "replicas")
    assert body["details"]["active_tasks"] == 10


def test_the_cap_counts_the_tasks_of_every_live_job_past_the_cap_in_jobs(as_alice, alice, settings):
    # Four live jobs without replicas or tasks (not writable through the API; the bound on the
    # live jobs' replicas must not stop at the first cap + 1 of them), then one unfinished task.
    for i in range(4):
        submit(alice, f"empty-{i}")
    settings.MAX_ACTIVE_TASKS_PER_USER = 3
    Task.objects.filter(job__name__startswith="/alice/empty-").delete()
    Job.objects.filter(name__startswith="/alice/empty-").update(replicas=0)
    submit(alice, "one")
    rejected(post(as_alice, {"name": "over", "replicas": 3}), 429, "RESOURCE_EXHAUSTED", "replicas")
    assert post(as_alice, {"name": "fits", "replicas": 2}).status_code == 201


# --- validation -----------------------------------------------------------------------------------


INVALID = [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "a:b"}, "name"),
    ({"name": "has space"}, "name"),
    ({"name": "a/b"}, "name"),
    ({"name": "x", "priority": "urgent"}, "priority"),
    ({"name": "x", "priority": 7}, "priority"),
    ({"name": "x", "memory": "lots"}, "memory"),
    ({"name": "x", "memory": -1}, "memory"),
    ({"name": "x", "cpu": "fast"}, "cpu"),
    ({"name": "x", "cpu": -1}, "cpu"),
    ({"name": "x", "replicas": 0}, "replicas"),
    ({"name": "x", "replicas": "many"}, "replicas"),
    ({"name": "x", "replicas": 1.5}, "replicas"),
    ({"name": "x", "device": "h100"}, "device"),
    ({"name": "x", "device": {"type": "fpga"}}, "device.type"),
    ({"name": "x", "device": {"type": "gpu", "count": 8}}, "device.variant"),
    ({"name": "x", "device": {"type": "gpu", "variant": "h100"}}, "device.count"),
    ({"name": "x", "device": {"type": "tpu", "variant": "v5p-8", "count": 0}}, "device.count"),
    ({"name": "x", "constraints": "zone=a"}, "constraints"),
    ({"name": "x", "constraints": [{"op": "eq", "value": "a"}]}, "constraints[0].key"),
    ({"name": "x", "constraints": [{"key": "zone", "op": "near", "value": "a"}]}, "constraints[0].op"),
    ({"name": "x", "constraints": [{"key": "zone", "op": "in", "value": "a"}]}, "constraints[0].value"),
    ({"name": "x", "constraints": [{"key": "zone", "op": "exists", "value": "a"}]}, "constraints[0].value"),
    ({"name": "x", "constraints": [{"key": "zone", "op": "eq"}]}, "constraints[0].value"),
    ({"name": "x", "constraints": [{"key": "zone", "value": "a", "soft": "yes"}]}, "constraints[0].soft"),
    ({"name": "x", "command": "python train.py"}, "command"),
    ({"name": "x", "argv": [1, 2]}, "argv[0]"),
    ({"name": "x", "max_retries_failure": -1}, "max_retries_failure"),
    ({"name": "x", "max_retries_preemption": "lots"}, "max_retries_preemption"),
    ({"name": "x", "scheduling_timeout_seconds": 0}, "scheduling_timeout_seconds"),
    ({"name": "x", "system_reason": "nul\x00byte"}, "system_reason"),
    ({"name": "x", "colour": "red"}, "colour"),
]


@pytest.mark.parametrize(("body", "field"), INVALID, ids=[f"{f}:{b}" for b, f in INVALID])
def test_malformed_submissions_are_invalid_argument_naming_the_field(as_alice, body, field):
    body_json = rejected(post(as_alice, body), 400, "INVALID_ARGUMENT", field)
    assert body_json["message"].startswith(f"{field}:")


def test_a_body_that_is_not_an_object_is_invalid_argument(as_alice):
    rejected(post(as_alice, ["train"]), 400, "INVALID_ARGUMENT")


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ("16Gi", 16 * GIB),
        ("512Mi", 512 << 20),
        ("2G", 2_000_000_000),
        ("1.5Gi", 3 * GIB // 2),
        (8 * GIB, 8 * GIB),
        ("4096B", 4096),
        ("64GiB", 64 * GIB),
        ("8 GB", 8_000_000_000),
    ],
)
def test_memory_accepts_bytes_and_sizes(as_alice, memory, expected):
    assert post(as_alice, {"name": "x", "memory": memory}).json()["resources"]["memory_bytes"] == expected


@pytest.mark.parametrize(("memory", "suggestion"), [("8", "8Gi"), (8, "8Gi"), ("1.5", "1.5Gi"), ("1024", "1024Gi")])
def test_memory_without_a_unit_is_refused_with_the_size_it_probably_meant(as_alice, memory, suggestion):
    """``8`` was accepted as 8 bytes, which no task runs in: a string needs its unit, and an
    integer (bytes) below a MiB cannot be meant."""
    body = rejected(post(as_alice, {"name": "x", "memory": memory}), 400, "INVALID_ARGUMENT", "memory")
    assert f"did you mean {suggestion}?" in body["message"]
    assert not Job.objects.exists()


def test_the_whole_spec_is_stored(as_alice):
    response = post(
        as_alice,
        {
            "name": "train",
            "replicas": 4,
            "cpu": 1.5,
            "memory": "16Gi",
            "device": {"type": "TPU", "variant": "v5p-8", "count": 4},
            "group_by": "tpu-name",
            "constraints": [
                {"key": "zone", "op": "in", "value": ["a", "b"]},
                {"key": "region", "value": "us", "soft": True},
            ],
            "scheduling_timeout_seconds": 600,
            "max_retries_preemption": 3,
            "max_retries_failure": 1,
            "command": ["python", "train.py"],
            "argv": ["iris", "job", "run"],
        },
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(name="/alice/train")
    assert (job.cpu_millicores, job.memory_bytes) == (1500, 16 * GIB)
    assert (job.device_type, job.device_variant, job.device_count) == ("tpu", "v5p-8", 4)
    assert job.group_by == "tpu-name"
    assert job.constraints == [
        {"key": "zone", "op": "in", "value": ["a", "b"], "soft": False},
        {"key": "region", "op": "eq", "value": "us", "soft": True},
    ]
    assert job.scheduling_deadline_ms == job.submitted_at_ms + 600_000
    assert (job.max_retries_preemption, job.max_retries_failure) == (3, 1)
    assert job.command == ["python", "train.py"]
    assert job.submission_argv == ["iris", "job", "run"]
    assert list(job.tasks.order_by("index").values_list("index", "state")) == [(i, "pending") for i in range(4)]


def test_defaults_are_one_core_one_gib_cpu_device(as_alice):
    job = post(as_alice, {"name": "x"}).json()
    assert job["resources"] == {"cpu": 1.0, "cpu_millicores": 1000, "memory_bytes": GIB, "device": {"type": "cpu"}}
    assert (job["replicas"], job["task_counts"]) == (1, {"pending": 1})


def test_submission_times_are_strictly_increasing(alice):
    # A job from a clock ahead of ours: later submissions still sort after it.
    first = submit(alice, "a")
    Job.objects.filter(pk=first.pk).update(submitted_at_ms=now_ms() + 60_000)
    times = [submit(alice, f"j{i}").submitted_at_ms for i in range(5)]
    last = Job.objects.get(pk=first.pk).submitted_at_ms
    for t in times:
        assert t > last
        last = t


# --- atomicity and the prompt tick ----------------------------------------------------------------


REJECTIONS = [
    ({"name": "x", "priority": "production"}, 403),
    ({"name": "x", "priority": "batch", "replicas": 20_000}, 422),
    ({"name": "x", "priority": "batch", "device": {"type": "gpu"}}, 400),
    ({"name": "dup", "priority": "batch"}, 409),
    ({"name": "x", "priority": "interactive"}, 403),
]


@pytest.mark.parametrize(("body", "status"), REJECTIONS, ids=[str(s) for _, s in REJECTIONS])
def test_a_rejected_submission_writes_nothing(
    as_alice, alice, alice_max_batch, body, status, django_capture_on_commit_callbacks
):
    submit(alice, "dup", priority="batch")
    before = (Job.objects.count(), Task.objects.count(), AuditEntry.objects.count())
    with django_capture_on_commit_callbacks() as callbacks:
        assert post(as_alice, body).status_code == status
    assert (Job.objects.count(), Task.objects.count(), AuditEntry.objects.count()) == before
    assert callbacks == []


def test_a_prompt_tick_is_requested_after_commit(as_alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        assert post(as_alice, {"name": "x"}).status_code == 201
    assert callbacks == [request_prompt_tick]


def test_a_broker_outage_never_fails_a_submission(as_alice, monkeypatch, caplog, django_capture_on_commit_callbacks):
    from celery import current_app

    def broker_down(*args, **kwargs):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(current_app, "send_task", broker_down)  # the broker is the external here
    with caplog.at_level(logging.WARNING, logger="scheduler.jobs.submit"):
        with django_capture_on_commit_callbacks(execute=True):
            response = post(as_alice, {"name": "x"})
    assert response.status_code == 201
    assert Job.objects.filter(name="/alice/x").exists()
    assert "could not enqueue a prompt tick" in caplog.text


# --- cost and order of a submission (issue 14) ------------------------------------------------------


def _statements_of_a_submission(client, name: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert post(client, {"name": name}).status_code == 201
    return len(captured.captured_queries)


def test_a_submissions_statements_do_not_grow_with_the_users_or_the_clusters_jobs(as_alice):
    from tests.personas import make_job

    make_worker()
    post(as_alice, {"name": "warm"})  # first-request work (content types, groups) is not the point
    few = _statements_of_a_submission(as_alice, "one")
    for i in range(200):
        make_job(f"/alice/old-{i}")
        make_job(f"/bob/other-{i}")
    many = _statements_of_a_submission(as_alice, "two")
    assert Job.objects.filter(user="alice").count() == 203 and Job.objects.filter(user="bob").count() == 200
    assert many == few
    assert (
        few <= 13
    )  # token (1), budget (2), cap, id free, clock, job, tasks, its event, savepoint (2), capacity; +1 user lock on PostgreSQL


@pytest.mark.postgres
def test_on_postgresql_a_submission_is_four_prepared_statements_and_its_transaction(as_alice):
    """Issue 26: the token, the identity's lock, the rules' reads (with the capacity warning's
    question), the write (clock, job and tasks), each a prepared statement, the token (once this
    process has seen it authenticate: ``submit37``), the lock and the reads sent together (one
    round trip with the transaction's BEGIN); BEGIN and COMMIT (or the test's savepoint)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_worker()
    post(as_alice, {"name": "warm"})
    with CaptureQueriesContext(connection) as captured:
        response = post(as_alice, {"name": "three", "replicas": 3})
    assert response.status_code == 201 and len(response.json()["tasks"]) == 3
    assert Task.objects.filter(job__name="/alice/three").count() == 3
    statements = [q["sql"] for q in captured.captured_queries]
    prepared = [sql for sql in statements if sql.endswith(("-- prepared", "-- prepared, pipelined"))]
    assert len(prepared) == 4, statements
    pipelined = [sql for sql in prepared if sql.endswith("pipelined")]
    assert [sql[:30] for sql in pipelined] == [
        'SELECT t."digest", t."token_ke',
        "SELECT pg_advisory_xact_lock(h",
        "SELECT (SELECT ARRAY[b.budget_",
    ], statements
    assert len(statements) - len(prepared) <= 2, statements  # BEGIN/COMMIT, or SAVEPOINT/RELEASE in a test


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_submission_commits_with_its_write_and_a_raced_name_writes_nothing(alice, monkeypatch):
    """Issue 26: outside a caller's transaction the write's round trip carries the COMMIT (the
    token, the lock with the reads, the write with the COMMIT: three round trips), the prompt
    tick is asked for after it; a name taken between the reads and the write (a race) fails the
    write, so nothing of the submission is written and the answer is the name's error."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.jobs import submit as submit_module
    from scheduler.models import StagedEvent
    from scheduler.store import submission_rows

    asked = []
    monkeypatch.setattr(submit_module, "request_prompt_tick", lambda: asked.append("tick"))
    with CaptureQueriesContext(connection) as captured:
        job = submit_job(alice, {"name": "first", "command": ["true"], "replicas": 2})
    assert asked == ["tick"]
    statements = [q["sql"] for q in captured.captured_queries]
    assert [sql[:20] for sql in statements if sql.endswith("-- prepared, COMMIT pipelined")] == [
        "WITH stamp AS (SELEC"
    ], statements
    assert Task.objects.filter(job__name="/alice/first").count() == 2 and job.replicas == 2
    events = StagedEvent.objects.count()

    reads = submission_rows.rule_reads
    # As if the other submission's write had not committed when these reads ran.
    monkeypatch.setattr(submission_rows, "rule_reads", lambda *a, **k: replace(reads(*a, **k), id_taken=False))
    with pytest.raises(FailedPrecondition, match="already exists"):
        submit_job(alice, {"name": "first", "command": ["true"], "replicas": 3})
    assert asked == ["tick"]
    assert Job.objects.count() == 1 and Task.objects.count() == 2 and StagedEvent.objects.count() == events


@pytest.mark.postgres
def test_on_postgresql_the_submissions_write_keeps_one_generic_plan(alice):
    """Issue 26: PostgreSQL plans a prepared statement afresh for its first five runs, then keeps
    one generic plan if it costs no more than those. The write once counted its task indexes with
    generate_series(0, n - 1), a thousand rows to a generic plan, so it was planned again on every
    submission; the indexes as one array parameter keep the generic plan."""
    from django.db import connection

    def plans() -> dict[str, tuple[int, int]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                ["WITH stamp AS (SELECT scheduler_next_submission_ms(%"],
            )
            return {name: (generic, custom) for name, generic, custom in cursor.fetchall()}

    # The session's statements outlive a test (one per set of parameter types): count this test's runs.
    before = plans()
    for i in range(8):
        submit(alice, f"planned-{i}", replicas=1 + i % 3)
    [(generic, custom)] = [
        (g - before.get(name, (0, 0))[0], c - before.get(name, (0, 0))[1])
        for name, (g, c) in plans().items()
        if (g, c) != before.get(name)
    ]
    assert generic + custom == 8
    assert generic >= 3 and custom <= 5


def test_the_answer_to_a_submission_is_what_reading_the_job_answers(as_alice):
    make_worker()
    body = post(
        as_alice, {"name": "x", "replicas": 3, "constraints": [{"key": "zone", "op": "eq", "value": "a"}]}
    ).json()
    assert body.pop("warnings") == []
    assert body == as_alice.get("/api/v1/jobs/alice/x").json()


def test_submission_times_are_strictly_increasing_and_after_every_job_written(alice):
    from tests.personas import NOW_MS, make_job

    make_job("/bob/future", submitted_at_ms=NOW_MS + 10_000)  # written without the submission clock
    times = [submit(alice, f"t{i}").submitted_at_ms for i in range(3)]
    assert times == sorted(set(times)) and times[0] > NOW_MS + 10_000


def test_a_burst_of_submissions_asks_for_one_prompt_tick_until_the_tick_starts(as_alice, monkeypatch):
    from celery import current_app

    from scheduler.foundation.enqueue import PROMPT_TICK, forget_request

    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: sent.append(name))  # the broker is external
    for name in ("a", "b", "c"):
        request_prompt_tick()
    assert sent == [PROMPT_TICK]
    forget_request(PROMPT_TICK)  # what the tick task does first
    request_prompt_tick()
    assert sent == [PROMPT_TICK, PROMPT_TICK]


def test_a_failed_prompt_tick_request_is_sent_again_by_the_next_submission(as_alice, monkeypatch):
    from celery import current_app

    sent = []

    def flaky(name, **kwargs):
        sent.append(name)
        if len(sent) == 1:
            raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(current_app, "send_task", flaky)
    request_prompt_tick()
    request_prompt_tick()
    assert len(sent) == 2


def test_a_prompt_tick_asked_for_soon_after_a_tick_started_waits_for_the_minimum_spacing(
    as_alice, monkeypatch, settings
):
    from celery import current_app

    from scheduler.foundation import enqueue
    from scheduler.foundation.enqueue import PROMPT_TICK, task_started

    settings.PROMPT_TICK_MIN_INTERVAL_MS = 500
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: sent.append(kwargs))
    now = [1_000.0]
    monkeypatch.setattr(enqueue.time, "time", lambda: now[0])
    task_started(PROMPT_TICK, keep_seconds=2)  # a tick starts
    now[0] += 0.2
    request_prompt_tick()
    assert sent[-1]["countdown"] == pytest.approx(0.3)  # the rest of the 500 ms after that start
    assert sent[-1]["expires"] == pytest.approx(0.3 + settings.TICK_SECONDS)
    task_started(PROMPT_TICK, keep_seconds=2)  # that tick starts
    now[0] += 0.6
    request_prompt_tick()  # past the interval: sent at once, as before
    assert "countdown" not in sent[-1] and len(sent) == 2


def test_with_no_minimum_spacing_a_prompt_tick_is_sent_at_once(as_alice, monkeypatch, settings):
    from celery import current_app

    from scheduler.foundation.enqueue import PROMPT_TICK, task_started

    settings.PROMPT_TICK_MIN_INTERVAL_MS = 0
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: sent.append(kwargs))
    task_started(PROMPT_TICK, keep_seconds=2)
    request_prompt_tick()
    assert len(sent) == 1 and "countdown" not in sent[0]


def test_a_prompt_tick_sent_with_a_countdown_covers_this_processs_submissions_until_it_can_start(
    as_alice, monkeypatch, settings
):
    """Until a request sent with a countdown can start, a submission here is covered by it: no
    round trip to the cache (issue 26). Past that moment, it asks the cache again."""
    from celery import current_app

    from scheduler.foundation import enqueue
    from scheduler.foundation.enqueue import PROMPT_TICK, task_started

    settings.PROMPT_TICK_MIN_INTERVAL_MS = 500
    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: sent.append(kwargs))
    now = [1_000.0]
    monkeypatch.setattr(enqueue.time, "time", lambda: now[0])
    task_started(PROMPT_TICK, keep_seconds=2)  # a tick starts
    now[0] += 0.1
    request_prompt_tick()  # sent for 400 ms from now
    assert len(sent) == 1
    asked = []
    monkeypatch.setattr(enqueue, "_add_flag", lambda *a, **k: asked.append(a) or False)
    now[0] += 0.3  # 100 ms before the request can start: covered
    request_prompt_tick()
    assert asked == []
    now[0] += 0.06  # within the margin of its start: the cache is asked again
    request_prompt_tick()
    assert len(asked) == 1 and len(sent) == 1


def test_the_prompt_tick_flag_is_the_one_djangos_cache_reads_and_clears(as_alice, monkeypatch):
    """The flag set without Django's cache client (one client per process) is the cache's own
    key and value: ``cache.get`` reads it, ``forget_request`` clears it (Redis or not)."""
    from celery import current_app
    from django.core.cache import cache

    from scheduler.foundation.enqueue import PROMPT_TICK, _requested, forget_request

    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: None)
    request_prompt_tick()
    assert cache.get(_requested(PROMPT_TICK)) == 1
    forget_request(PROMPT_TICK)
    assert cache.get(_requested(PROMPT_TICK)) is None
