"""One task's numbers, read as a user reads them: the queue page's row, the job page and the
``iris`` CLI (``iris queue``, ``iris job explain``) show the same position, band count, band
and tick for the same task (issue 12)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from scheduler.models import TickRecord
from scheduler.tick.run import run_tick
from tests.browser.conftest import save_screenshot, sign_in
from tests.cli.conftest import Iris
from tests.personas import make_job, make_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-one-truth-123"
PLACE = re.compile(r"position (\d+) of (\d+) in (\w+) as of tick (\d+)")


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_queue_page_job_page_and_cli_agree_on_one_task(live_server, open_page, capsys, monkeypatch, tmp_path):
    alice = get_user_model().objects.create_user("alice", password=PASSWORD)
    get_user_model().objects.create_user("bob", password=PASSWORD)
    make_worker("w1", cpu=2, memory_gib=8)
    make_job("/bob/sweep", replicas=2, cpu=2)
    make_job("/alice/train", replicas=3, cpu=2)
    run_tick()
    tick = TickRecord.objects.latest("pk").pk

    page = open_page()
    sign_in(page, live_server, "alice", PASSWORD)

    # The job page: its first waiting task's place.
    page.goto(f"{live_server.url}/jobs/alice/train/")
    position_text = page.locator("#queue-position").inner_text()
    job_pos, job_count = (int(n.replace(",", "")) for n in re.findall(r"[\d,]+", position_text)[:2])
    assert f"as of tick {tick}" in position_text
    reason = page.locator("#pending-reason").inner_text()
    assert PLACE.search(reason).groups() == (str(job_pos), str(job_count), "INTERACTIVE", str(tick))
    save_screenshot(page, "one-truth-job")

    # Which task that is, from the job page's task table (the row whose reason carries that place).
    row = page.locator("tr", has_text=f"position {job_pos} of {job_count} in INTERACTIVE").first
    index = row.locator("td").first.inner_text().strip()
    task = f"/alice/train/{index}"

    # The queue page: the same task's # and reason.
    page.goto(f"{live_server.url}/queue/?band=interactive")
    queue_row = page.locator("#queue tr", has_text=task)
    cells = queue_row.locator("td")
    assert int(cells.nth(0).inner_text().replace(",", "")) == job_pos
    assert PLACE.search(queue_row.inner_text()).groups() == (str(job_pos), str(job_count), "INTERACTIVE", str(tick))
    heading = page.locator("#band-interactive").inner_text()
    assert re.search(rf"\b{job_count} pending", heading)
    save_screenshot(page, "one-truth-queue")

    # The CLI, against the same server.
    monkeypatch.setenv("HOME", str(tmp_path))
    from scheduler.models import ApiToken

    monkeypatch.setenv("IRIS_SERVER", live_server.url)
    monkeypatch.setenv("IRIS_TOKEN", ApiToken.objects.create(user=alice, name="tests")[1])
    iris = Iris(live_server.url, capsys, monkeypatch)
    listed = iris("queue", "--band", "interactive")
    assert listed.code == 0, listed.err
    line = next(line for line in listed.out.splitlines() if task in line)
    assert line.split()[0] == str(job_pos) and f" {job_count} " in line
    assert PLACE.search(line).groups() == (str(job_pos), str(job_count), "INTERACTIVE", str(tick))
    explained = iris("job", "explain", "/alice/train")
    assert explained.code == 0, explained.err
    assert f"{job_pos} of {job_count} in the INTERACTIVE queue (as of tick {tick})" in explained.out
