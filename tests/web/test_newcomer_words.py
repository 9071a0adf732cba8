"""Issue 28's words and small truths on the console: bulk cancel counts what it kills."""

from __future__ import annotations

import pytest

from tests.personas import submit
from tests.web.test_pages import text

pytestmark = pytest.mark.django_db


def test_bulk_cancel_names_descendants_only_when_there_are_some(clients, alice):
    for i in range(2):
        submit(alice, f"sweep-{i}")
    form = {"ids": ["/alice/sweep-0", "/alice/sweep-1"]}
    preview = text(clients["alice"].post("/jobs:cancel", form))
    assert "This cancels 2 jobs and kills 2 tasks" in preview and "descendants" not in preview
    done = clients["alice"].post("/jobs:cancel", {**form, "confirm": "yes"}, follow=True)
    page = text(done)
    assert "Cancelled 2 job(s): 2 task(s) killed." in page and "with descendants" not in page


def test_bulk_cancel_counts_the_descendants_it_kills(clients, alice):
    submit(alice, "parent")
    submit(alice, "child", parent="/alice/parent")
    form = {"ids": ["/alice/parent"]}
    preview = text(clients["alice"].post("/jobs:cancel", form))
    assert "This cancels 2 jobs (1 selected and 1 of their unfinished descendants)" in preview
    done = text(clients["alice"].post("/jobs:cancel", {**form, "confirm": "yes"}, follow=True))
    assert "Cancelled 1 job(s) and 1 descendant job(s): 2 task(s) killed." in done
