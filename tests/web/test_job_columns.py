"""The jobs table's columns are declared once (``scheduler/jobs/columns.py``) and that one
declaration drives the console's table, the sorts, ``GET jobs/`` and ``iris job list``."""

from __future__ import annotations

import re

from iris_cli.formatting import FALLBACK_JOB_COLUMNS, job_columns, job_list
from scheduler.api.serializers import JobSummarySerializer
from scheduler.jobs import listing
from scheduler.jobs.columns import JOB_COLUMNS, KINDS, SORTS, columns_wire
from tests.personas import make_job, token_client


def test_every_column_sorts_by_a_known_field_and_lists_a_serialized_one():
    assert listing.SORTS is SORTS
    assert SORTS == {c.key: c.sort for c in JOB_COLUMNS if c.sort}
    served = set(JobSummarySerializer().fields)
    assert {c.field for c in JOB_COLUMNS} <= served
    assert {c.kind for c in JOB_COLUMNS} <= set(KINDS)
    assert len({c.key for c in JOB_COLUMNS}) == len(JOB_COLUMNS)


def test_the_console_table_has_one_header_and_one_cell_per_declared_column(clients):
    make_job("/alice/run", submitted_at_ms=1_800_000_000_000)
    html = clients["alice"].get("/jobs/?group=user").content.decode()
    head = re.search(r"<thead>(.*?)</thead>", html, re.S).group(1)
    assert len(re.findall(r"<th[ >]", head)) == len(JOB_COLUMNS) + 1  # and the selection box
    for column in JOB_COLUMNS:
        assert column.label in head
        assert (f'data-sort="{column.key}"' in head) == (column.sort is not None)
    assert f'colspan="{len(JOB_COLUMNS) + 1}"' in html
    row = re.search(r"<tr>\s*<td>(?:<input[^>]*>)?</td>(.*?)</tr>", html, re.S).group(1)
    assert row.count("<td") == len(JOB_COLUMNS)
    assert "data-no-cell" not in html  # every declared column has its cell in the template


def test_the_api_list_names_its_columns_and_the_cli_shows_them(alice):
    make_job("/alice/run", submitted_at_ms=1_800_000_000_000)
    page = token_client(alice).get("/api/v1/jobs/").json()
    assert page["columns"] == columns_wire()
    assert [header for header, _ in job_columns(page)] == [(c.short or c.label).upper() for c in JOB_COLUMNS]
    shown = job_list(page).splitlines()
    assert shown[0].split()[:2] == ["JOB", "USER"] and "ROUTE" in shown[0]
    assert shown[1].split()[:2] == ["/alice/run", "alice"]


def test_against_a_server_that_names_no_columns_the_cli_keeps_its_old_table():
    page = {"count": 1, "results": [{"id": "/a/j", "user": "a", "band": "batch", "state": "pending"}]}
    assert [h for h, _ in job_columns(page)] == [c["short"].upper() for c in FALLBACK_JOB_COLUMNS]
    assert job_list(page).splitlines()[1].split()[:4] == ["/a/j", "a", "BATCH", "-"]
