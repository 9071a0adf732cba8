"""The jobs table's columns, declared once (as NetBox's ``tables.py`` does): the console's table
(its headers, its sort links, the group row's ``colspan``, and the order of its cells), the sorts
``jobs.listing`` accepts, the fields ``GET /api/v1/jobs/`` must carry (``JobSummarySerializer``;
a test ties them), and ``iris job list``'s table, which the API sends in each list answer's
``columns`` (the CLI renders the columns the server names, each by its ``kind``).

A new column is one :class:`JobColumn` here, its cell in ``templates/scheduler/jobs.html`` (one
``elif`` of the cell loop) and, if it is a new field, the field in ``JobSummarySerializer``.
"""

from __future__ import annotations

from dataclasses import dataclass

# How the CLI renders a column's field (iris_cli.formatting.JOB_CELLS): a job id, plain text, a
# band, task counts by state, a resources object, a timestamp.
KINDS = ("job", "text", "band", "counts", "resources", "time")


@dataclass(frozen=True, slots=True)
class JobColumn:
    """``key``: the URL's sort name and the column's name on the wire; ``label``: the console's
    header (the CLI shows it in capitals); ``field``: the field of ``GET jobs/`` results the CLI
    reads; ``kind``: how the CLI renders it (:data:`KINDS`); ``sort``: the queryset field it sorts
    by (``effective`` is ``jobs.listing``'s annotation), None if it does not sort; ``short``: the
    header where a terminal has less room than the console (default: ``label``)."""

    key: str
    label: str
    field: str
    kind: str
    sort: str | None = None
    short: str = ""

    def wire(self) -> dict:
        """What a list answer says about the column (``columns``)."""
        return {
            "key": self.key,
            "label": self.label,
            "short": self.short or self.label,
            "field": self.field,
            "kind": self.kind,
        }


JOB_COLUMNS: tuple[JobColumn, ...] = (
    JobColumn("name", "Job", "id", "job", sort="name"),
    JobColumn("user", "User", "user", "text", sort="user"),
    JobColumn("band", "Band", "band", "band", sort="band"),
    JobColumn("effective", "Effective band", "effective_band", "band", sort="effective", short="Effective"),
    JobColumn("state", "State", "state", "text", sort="state"),
    JobColumn("route", "Route", "route", "text", sort="route"),
    JobColumn("tasks", "Tasks", "task_counts", "counts", sort="replicas"),
    JobColumn("resources", "Resources per task", "resources", "resources", short="Resources"),
    JobColumn("submitted", "Submitted", "created_at", "time", sort="submitted_at_ms"),
)

# Sortable columns: URL name -> queryset field.
SORTS: dict[str, str] = {c.key: c.sort for c in JOB_COLUMNS if c.sort is not None}


def columns_wire() -> list[dict]:
    """The columns as ``GET jobs/`` sends them, in the table's order."""
    return [c.wire() for c in JOB_COLUMNS]
