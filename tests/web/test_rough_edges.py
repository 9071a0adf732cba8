"""Bad input and rough edges found running the product (issue 10, section 2), on the console and
the API; the CLI's side is in tests/cli/test_cli_rough_edges.py."""

from __future__ import annotations

from scheduler.models import AuditEntry, Job, UpliftGrant, UserBudget, Worker
from tests.personas import make_worker, token_client

JOB = {"name": "train", "replicas": "1", "cpu": "1", "memory": "1Gi", "device_type": "cpu", "command": "python x.py"}


def form_errors(response) -> dict:
    return {name: " ".join(errs) for name, errs in response.context["form"].errors.items()}


def test_an_empty_command_is_refused_on_the_console_and_the_api(clients, alice):
    response = clients["alice"].post("/jobs/new/", {**JOB, "command": "  "})
    assert response.status_code == 400 and "command" in form_errors(response)
    api = token_client(alice)
    for body in ({"name": "a"}, {"name": "a", "command": []}, {"name": "a", "command": [""]}):
        answer = api.post("/api/v1/jobs/", body, format="json")
        assert answer.status_code == 400, answer.content
        assert answer.json()["details"]["field"].startswith("command")
    assert not Job.objects.exists()


def test_a_job_no_worker_could_run_is_accepted_with_a_warning_naming_the_largest_host(clients, alice):
    make_worker("small", cpu=8, memory_gib=32)
    make_worker("tiny", cpu=2, memory_gib=4)
    answer = token_client(alice).post("/api/v1/jobs/", {"name": "huge", "cpu": 1000, "command": ["x"]}, format="json")
    assert answer.status_code == 201
    assert answer.json()["warnings"] == [
        "no registered worker could run a task of this job (1,000 cores, 1 GiB); largest host: 8 cores, 32 GiB. "
        "It waits until a large enough worker registers."
    ]
    fits = token_client(alice).post("/api/v1/jobs/", {"name": "fits", "cpu": 8, "command": ["x"]}, format="json")
    assert fits.json()["warnings"] == []
    page = clients["alice"].post("/jobs/new/", {**JOB, "name": "big", "memory": "99999Ti"}, follow=True)
    assert "largest host: 8 cores, 32 GiB" in page.content.decode()


def test_a_gpu_job_with_no_gpu_host_says_there_is_none(alice):
    make_worker("cpu-only", cpu=8, memory_gib=32)
    answer = token_client(alice).post(
        "/api/v1/jobs/",
        {"name": "g", "device": {"type": "gpu", "variant": "h100", "count": 8}, "command": ["x"]},
        format="json",
    )
    assert "there is no GPU h100 host" in answer.json()["warnings"][0]


def test_the_uplift_forms_state_their_duration_bounds_in_hours(clients, alice, ada):
    response = clients["alice"].post(
        "/budgets/alice:request-uplift", {"budget_limit": "5000", "duration_hours": "0.01", "reason": "r"}
    )
    assert response.status_code == 400
    assert form_errors(response)["duration_hours"] == "must be at least 0.02 hours (one minute)"
    response = clients["alice"].post(
        "/budgets/alice:request-uplift", {"budget_limit": "5000", "duration_hours": "3000", "reason": "r"}
    )
    assert form_errors(response)["duration_hours"] == "must be at most 2,160 hours (90 days)"
    assert not UpliftGrant.objects.exists()


def test_replicas_memory_and_budget_bounds_are_stated_in_the_fields_units(alice, ada, settings):
    api = token_client(alice)
    body = api.post("/api/v1/jobs/", {"name": "r", "replicas": 2**40, "command": ["x"]}, format="json").json()
    assert "limit of 10,000 tasks per job" in body["message"] and "2147483647" not in body["message"]
    body = api.post("/api/v1/jobs/", {"name": "r", "memory": 2**61, "command": ["x"]}, format="json").json()
    assert body["message"] == "memory: must be at most 1,024Pi"
    body = token_client(ada).put("/api/v1/budgets/alice", {"budget_limit": 2**63, "reason": "r"}, format="json").json()
    assert body["message"] == "budget_limit: must be at most 1,000,000,000,000,000 points"
    assert not UserBudget.objects.exists()


def test_identical_uplift_requests_and_a_band_already_held_are_refused(alice):
    api = token_client(alice)
    body = {"budget_limit": 5000, "reason": "deadline", "duration_seconds": 3600}
    first = api.post("/api/v1/uplifts/", body, format="json")
    assert first.status_code == 201
    again = api.post("/api/v1/uplifts/", body, format="json")
    assert (
        again.status_code == 409 and f"uplift {first.json()['id']} already asks for the same" in again.json()["message"]
    )
    held = api.post("/api/v1/uplifts/", {"max_band": "batch", "reason": "r", "duration_seconds": 3600}, format="json")
    assert held.status_code == 409 and "may already submit BATCH work" in held.json()["message"]
    assert UpliftGrant.objects.count() == 1


def test_a_budget_for_an_unknown_user_needs_the_explicit_flag(clients, ada):
    api = token_client(ada)
    refused = api.put("/api/v1/budgets/carlo", {"budget_limit": 10, "reason": "typo of carol"}, format="json")
    assert refused.status_code == 404 and "create_user_budget" in refused.json()["message"]
    assert not UserBudget.objects.exists()
    created = api.put(
        "/api/v1/budgets/newcomer",
        {"budget_limit": 10, "reason": "starts monday", "create_user_budget": True},
        format="json",
    )
    assert created.status_code == 200 and UserBudget.objects.filter(user_id="newcomer").exists()
    response = clients["ada"].post("/manage/", {"user": "other", "budget_limit": "5", "reason": "r"})
    assert response.status_code == 400
    clients["ada"].post("/manage/", {"user": "other", "new_user": "on", "budget_limit": "5", "reason": "r"})
    assert UserBudget.objects.filter(user_id="other").exists()


def test_a_drained_worker_can_be_undrained_by_operators_only_and_both_are_audited(clients, olivia):
    make_worker("w1")
    assert clients["olivia"].post("/workers/w1:drain").status_code == 302
    assert clients["alice"].post("/workers/w1:undrain").status_code == 403
    assert Worker.objects.get(name="w1").draining
    page = clients["olivia"].get("/workers/").content.decode()
    assert "/workers/w1:undrain" in page
    assert clients["olivia"].post("/workers/w1:undrain").status_code == 302
    assert not Worker.objects.get(name="w1").draining
    answer = token_client(olivia).post("/api/v1/workers/w1:undrain", format="json")
    assert answer.status_code == 200 and answer.json()["draining"] is False
    assert [e.action for e in AuditEntry.objects.order_by("pk")] == ["worker.drain", "worker.undrain", "worker.undrain"]
    assert AuditEntry.objects.filter(actor_name="olivia", target="worker w1").count() == 3


def test_get_on_a_post_only_console_url_is_an_html_405_page_and_on_the_api_the_json_error(clients, alice):
    for path in ["/jobs/alice/train:cancel", "/workers/w1:drain", "/workers/w1:undrain", "/scheduler/tick"]:
        response = clients["olivia"].get(path)
        assert response.status_code == 405 and response["Allow"] == "POST", path
        assert "This address is an action, not a page" in response.content.decode()
    answer = token_client(alice).get("/api/v1/jobs/alice/train:cancel")
    assert answer.status_code == 405 and answer.json()["code"] == "INVALID_ARGUMENT"


def test_the_queue_job_filter_takes_the_slash_form_every_page_shows(clients, alice, bob):
    from scheduler.tick.run import run_tick
    from tests.personas import submit

    submit(alice, "tpu-probe", cpu=1000)
    submit(bob, "other", cpu=1000)
    run_tick()
    page = clients["bob"].get("/queue/", {"job": "/alice/tpu-probe"}).content.decode()
    assert "/alice/tpu-probe" in page and "/bob/other" not in page
    answer = token_client(bob).get("/api/v1/queue/", {"job": "/alice/tpu-probe"}).json()
    assert [r["task"] for r in answer["results"]] == ["/alice/tpu-probe/0"]


def test_an_address_no_page_has_says_so_not_the_resolver_s_class_name(clients):
    response = clients["alice"].get("/whatif/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "There is no page at /whatif/." in page and "Resolver404" not in page
