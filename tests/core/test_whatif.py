"""Where a new job's first task would stand in its band's round robin (``core.whatif``)."""

from __future__ import annotations

import pytest

from scheduler.core.ordering import round_robin
from scheduler.core.whatif import queue_place


@pytest.mark.parametrize(
    ("band", "spend", "user", "expected"),
    [
        ([], {}, "alice", (1, 1)),  # an empty band
        ([["bob", 3]], {"bob": 10}, "alice", (1, 4)),  # lower spend: first in the round
        ([["bob", 3]], {"bob": 10, "alice": 20}, "alice", (2, 4)),  # higher spend: after bob's first
        ([["bob", 3]], {"bob": 10, "alice": 10}, "alice", (2, 4)),  # equal spend: the newcomer comes last
        ([["alice", 2], ["bob", 2]], {"bob": 10}, "alice", (5, 5)),  # after alice's own two, round 3
        ([["bob", 1], ["alice", 2], ["carol", 5]], {"bob": 0, "alice": 5, "carol": 9}, "alice", (6, 9)),
    ],
)
def test_a_new_job_queues_after_its_users_pending_tasks_in_the_round_robin(band, spend, user, expected):
    assert queue_place(band, spend, user, replicas=1) == expected


def test_the_place_is_the_one_round_robin_would_give():
    band = [["dan", 1], ["alice", 3], ["bob", 2], ["carol", 4]]
    spend = {"dan": 0, "alice": 5, "bob": 7, "carol": 9}
    buckets = {u: [f"{u}-{i}" for i in range(n)] for u, n in band}
    buckets["alice"].append("new")
    order = round_robin(buckets, spend)
    assert queue_place(band, spend, "alice", replicas=1) == (order.index("new") + 1, len(order))
