"""Rank masks (``core.rankmask``) against the plain sets they stand for."""

from hypothesis import given
from hypothesis import strategies as st

from scheduler.core.rankmask import by_score, everyone, mask_of, masks_by_value, workers_in

_ranks = st.integers(min_value=0, max_value=40)


@given(size=_ranks, data=st.data())
def test_a_masks_workers_are_its_members_in_rank_order(size, data):
    members = data.draw(st.sets(st.integers(min_value=0, max_value=max(size - 1, 0)))) if size else set()
    by_id = [100 + 7 * r for r in range(size)]  # the worker at each rank
    assert list(workers_in(mask_of(members, size), by_id)) == [by_id[r] for r in sorted(members)]


@given(size=_ranks, data=st.data())
def test_levels_hold_the_ranks_by_how_many_soft_masks_allow_them(size, data):
    subsets = st.sets(st.integers(min_value=0, max_value=max(size - 1, 0))) if size else st.just(set())
    matching = data.draw(subsets)
    allowed = data.draw(st.lists(subsets, max_size=3))
    levels = by_score(mask_of(matching, size), [mask_of(a, size) for a in allowed])
    by_rank = list(range(size))
    for k, level in enumerate(levels):
        assert set(workers_in(level, by_rank)) == {r for r in matching if sum(r in a for a in allowed) == k}


def test_masks_by_value_and_everyone():
    masks = masks_by_value(["a", None, "b", "a"])
    assert {value: list(workers_in(mask, [0, 1, 2, 3])) for value, mask in masks.items()} == {"a": [0, 3], "b": [2]}
    assert list(workers_in(everyone(3), ["x", "y", "z"])) == ["x", "y", "z"]
    assert list(workers_in(0, [])) == []
