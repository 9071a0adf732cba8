"""The reader's whole-list checks (``wire/columns.py``) and fast paths accept only what the per-item checks
accept, and a snapshot reads (or is refused) the same whichever path takes it."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.wire import SnapshotError, snapshot_from_json
from scheduler.core.wire.columns import all_job_ids, by_id
from scheduler.core.wire.read import JOB_ID, JOB_KEYS, _jobs_by_id

GOOD = ["/alice/train", "/alice/train/eval", "/bob/x"]

# Ids the pattern refuses, and how: each must make the whole list fail.
BAD_IDS = [
    "",
    "/",
    "/alice",
    "alice/train",
    "//alice/train",
    "/alice//train",
    "/alice/train/",
    "/alice/tr ain",
    "/alice/train\t",
    " /alice/train",
    "/alice/tr\u00a0ain",
    "/alice/tr\u2028ain",
    "/alice/train\n/bob/x",
    "\n/alice/train",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_refused_id_anywhere_fails_the_whole_list(bad):
    assert not JOB_ID.match(bad)
    for position in range(len(GOOD) + 1):
        ids = [*GOOD[:position], bad, *GOOD[position:]]
        assert not all_job_ids(ids)


def test_well_formed_ids_pass_together():
    assert all_job_ids(GOOD)
    assert all_job_ids(["/a/b"])
    assert all_job_ids([])
    assert all_job_ids(["/a/b/c/d/e", "/ü/ß"])


def test_an_id_ending_in_a_newline_is_left_to_the_pattern():
    # JOB_ID's "$" matches before a final newline, so the per-item check accepts this id; the
    # whole-list check refuses it, and the reader then takes the per-item path: read as before.
    assert JOB_ID.match("/alice/train\n")
    assert not all_job_ids(["/alice/train\n"])
    snapshot = snapshot_from_json({"now_ms": 0, "jobs": [{"id": "/a/b"}, {"id": "/alice/train\n"}]})
    assert list(snapshot.jobs) == ["/a/b", "/alice/train\n"]


ID_TEXT = st.text(alphabet=st.sampled_from("/ab\n \t\u00a0\u2028é"), max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(ID_TEXT, st.sampled_from(GOOD)), max_size=6))
def test_the_whole_list_check_agrees_with_the_pattern(ids):
    matched = all(JOB_ID.match(job_id) for job_id in ids)
    if all_job_ids(ids):
        assert matched
    elif not any(job_id.endswith("\n") for job_id in ids):
        assert not matched


def test_by_id_maps_ids_to_positions_and_items_in_order():
    items = [{"id": job_id, "replicas": 1} for job_id in GOOD]
    parsed = by_id(items, JOB_KEYS)
    assert list(parsed) == GOOD
    assert [parsed[job_id] for job_id in GOOD] == list(enumerate(items))
    assert parsed == _jobs_by_id(items, "jobs")
    assert by_id([], JOB_KEYS) == {}


class Id(str):
    pass


@pytest.mark.parametrize(
    "odd",
    [
        ["not an object"],
        [{"id": "/a/c", "colour": "red"}],
        [{"id": 7}],
        [{"replicas": 2}],
        [{"id": Id("/a/c")}],
        [{"id": "/a/b"}],
    ],
)
def test_by_id_leaves_any_other_shape_to_the_per_item_checks(odd):
    assert by_id([{"id": "/a/b"}, *odd], JOB_KEYS) is None


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ("not an object", "jobs[1]: expected an object"),
        ({"id": "/a/c", "colour": "red"}, "jobs[1].colour: unknown field"),
        ({"id": 7}, "jobs[1].id: expected a non-empty string"),
        ({"replicas": 2}, "jobs[1].id: expected a non-empty string"),
        ({"id": "/a/b"}, "jobs[1].id: duplicate job id '/a/b'"),
        ({"id": "/a//c"}, "jobs[1].id: expected a job id like /user/name"),
        ({"id": "/a/c d"}, "jobs[1].id: expected a job id like /user/name"),
    ],
)
def test_a_bad_job_after_good_ones_is_refused_as_the_per_item_checks_refuse_it(job, message):
    with pytest.raises(SnapshotError, match=message.replace("[", r"\[").replace("]", r"\]")):
        snapshot_from_json({"now_ms": 0, "jobs": [{"id": "/a/b"}, job, {"id": "/a/e"}]})


def test_a_str_subclass_id_reads_as_before():
    snapshot = snapshot_from_json({"now_ms": 0, "jobs": [{"id": "/a/b"}, {"id": Id("/a/c")}]})
    assert list(snapshot.jobs) == ["/a/b", "/a/c"]


@pytest.mark.parametrize("index", ["01", "00", "+1", "-1", " 1", "1 ", "1_0", "١", "²", "0x1", ""])
def test_a_task_index_spelled_otherwise_is_refused(index):
    # The listed tasks' fast path looks an index up by its one spelling; any other spelling
    # takes the in-order checks, which refuse it as before.
    doc = {"now_ms": 0, "jobs": [{"id": "/a/b", "replicas": 12}], "tasks": [{"id": f"/a/b/{index}"}]}
    with pytest.raises(SnapshotError, match=r"tasks\[0\]\.id: expected <job id>/<index>"):
        snapshot_from_json(doc)


@pytest.mark.parametrize(("index", "replicas"), [("3", 3), ("12", 3), ("99999999999999999999", 3)])
def test_a_task_index_past_its_jobs_replicas_is_refused(index, replicas):
    doc = {
        "now_ms": 0,
        "jobs": [{"id": "/a/b", "replicas": replicas}, {"id": "/a/c", "replicas": 20}],
        "tasks": [{"id": f"/a/b/{index}"}],
    }
    with pytest.raises(SnapshotError, match=rf"tasks\[0\]\.id: index {index} out of range"):
        snapshot_from_json(doc)


def test_listed_tasks_at_every_index_read_with_their_index():
    doc = {
        "now_ms": 0,
        "workers": [{"id": "w", "cpu_millicores": 1, "memory_bytes": 1}],
        "jobs": [{"id": "/a/b", "replicas": 12}, {"id": "/a/c", "replicas": 1}],
        "tasks": [{"id": f"/a/b/{i}", "state": "running", "worker": "w"} for i in (11, 0, 10, 1)]
        + [{"id": "/a/c/0", "state": "succeeded"}],
    }
    tasks = snapshot_from_json(doc).tasks
    assert [(t.id, t.index, t.state.value) for t in tasks if t.worker or t.job_id == "/a/c"] == [
        ("/a/b/0", 0, "running"),
        ("/a/b/1", 1, "running"),
        ("/a/b/10", 10, "running"),
        ("/a/b/11", 11, "running"),
        ("/a/c/0", 0, "succeeded"),
    ]
