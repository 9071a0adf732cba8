"""Keyset pages of the jobs table: every job once, in order, under every sort, by cursor; no OFFSET."""

from __future__ import annotations

import pytest

from scheduler.foundation.errors import InvalidArgument, NotFound
from scheduler.jobs import listing
from scheduler.models import Job
from tests.personas import submit

SORTS = [f"{sign}{column}" for column in listing.SORTS for sign in ("", "-")]


@pytest.fixture
def many_jobs(alice, bob, ada):
    """23 jobs with many ties in every column but the id (and the name)."""
    for i in range(23):
        owner = (alice, bob)[i % 2]
        job = submit(
            ada,
            f"/{owner.username}/j{i:02}",
            replicas=1 + i % 3,
            priority=("interactive", "batch", "production")[i % 3],
        )
        Job.objects.filter(pk=job.pk).update(
            state=("pending", "running", "succeeded", "pending")[i % 4], route=("", "workers")[i % 2 and i % 3 == 0]
        )
    return list(Job.objects.values_list("pk", flat=True))


def walk(view: listing.JobView, size: int = 5) -> tuple[list[str], list[listing.JobPage]]:
    qs = listing.filtered_jobs(listing.JobFilter(), frozenset({"bob"}))
    pages = [listing.page_of(qs, view, size=size)]
    while pages[-1].next:
        pages.append(listing.page_of(qs, view, cursor=pages[-1].next, size=size))
    return [job.name for page in pages for job in page.jobs], pages


@pytest.mark.parametrize("group", ["", "user", "effective"])
@pytest.mark.parametrize("sort", SORTS)
def test_following_the_cursors_returns_every_job_once_in_the_tables_order(many_jobs, sort, group):
    view = listing.JobView(sort=sort, group=group)
    names, pages = walk(view)
    qs = listing.filtered_jobs(listing.JobFilter(), frozenset({"bob"}))
    assert names == [job.name for job in listing.ordered(qs, view)]
    assert len(names) == len(set(names)) == len(many_jobs)
    assert [len(p.jobs) for p in pages] == [5, 5, 5, 5, 3]
    assert pages[0].previous is None and pages[-1].next is None

    # And back: each previous cursor gives exactly the page before.
    back = [pages[-1]]
    while back[-1].previous:
        back.append(listing.page_of(qs, view, cursor=back[-1].previous, size=5))
    assert [[j.name for j in p.jobs] for p in back[::-1]] == [[j.name for j in p.jobs] for p in pages]


def test_parse_cursor_refuses_a_signed_payload_of_the_wrong_shape():
    from django.core import signing

    view = listing.JobView()
    forged = signing.dumps({"s": view.sort, "g": "", "k": [1], "d": "n"}, salt=listing.CURSOR_SALT)
    with pytest.raises(InvalidArgument):
        listing.parse_cursor(view, forged)


def test_page_number_past_the_last_page_is_not_found(many_jobs):
    qs = listing.filtered_jobs(listing.JobFilter(), frozenset())
    with pytest.raises(NotFound):
        listing.page_of(qs, listing.JobView(), number=6, size=5)


@pytest.mark.parametrize("sort", ["state", "-state"])
def test_numbered_pages_of_the_state_sort_are_the_tables_order_in_slices(many_jobs, sort):
    # The ungrouped state sort reads finished and live jobs apart and merges them
    # (listing._state_rows); numbered pages (offsets) are the same rows as one ORDER BY's.
    view = listing.JobView(sort=sort)
    qs = listing.filtered_jobs(listing.JobFilter(), frozenset())
    names = [job.name for job in listing.ordered(qs, view)]
    assert {"pending", "running", "succeeded"} <= set(qs.values_list("state", flat=True))
    for number in range(1, 6):
        page = listing.page_of(qs, view, number=number, size=5)
        assert [job.name for job in page.jobs] == names[(number - 1) * 5 : number * 5]
        assert (page.next is None) == (number == 5)
