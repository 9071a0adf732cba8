"""The JSON snapshot and decision formats."""

import copy
from dataclasses import replace

import pytest

from benchmarks.synthetic import generate
from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.types import CPU_DEVICE, ClusterSnapshot, ConstraintOp, DeviceType, GroupSpec, TaskState
from scheduler.core.wire import SnapshotError, decision_to_json, snapshot_from_json, snapshot_to_json, task_sort_key
from scheduler.core.wire.write import _band_names, _task_order
from tests.core.builders import NOW, cluster, job, running, worker

MINIMAL = {
    "now_ms": NOW,
    "workers": [{"id": "w1", "cpu_millicores": 8000, "memory_bytes": 8 << 30}],
    "jobs": [{"id": "/alice/train", "replicas": 2}, {"id": "/alice/train/eval"}],
}


def test_omitted_fields_take_the_documented_defaults():
    snapshot = snapshot_from_json(MINIMAL)
    config = snapshot.config
    assert (config.max_tasks_per_job_per_cycle, config.max_assignments_per_worker, config.max_building_tasks) == (
        4,
        4,
        8,
    )
    assert (config.budget_defaults.budget_limit, config.budget_defaults.max_band) == (1000, Band.INTERACTIVE)
    assert snapshot.workers[0].healthy and snapshot.workers[0].attributes == {}
    assert snapshot.workers[0].device.type is DeviceType.CPU
    root, child = snapshot.jobs["/alice/train"], snapshot.jobs["/alice/train/eval"]
    assert (root.user, root.band, root.parent, root.replicas, root.group_by) == (
        "alice",
        Band.INTERACTIVE,
        None,
        2,
        None,
    )
    assert (root.max_retries_preemption, root.max_retries_failure, root.scheduling_deadline_ms) == (100, 0, None)
    assert (child.user, child.parent, child.depth) == ("alice", "/alice/train", 2)
    assert [(t.id, t.state) for t in snapshot.tasks] == [
        ("/alice/train/0", TaskState.PENDING),
        ("/alice/train/1", TaskState.PENDING),
        ("/alice/train/eval/0", TaskState.PENDING),
    ]


def test_a_child_inherits_its_parents_band_and_root_submission_time():
    doc = {
        "now_ms": 0,
        "jobs": [
            {"id": "/a/root/child", "submitted_at_ms": 50},
            {"id": "/a/root", "band": "production", "submitted_at_ms": 7},
        ],
    }
    child = snapshot_from_json(doc).jobs["/a/root/child"]
    assert (child.band, child.root_submitted_at_ms, child.submitted_at_ms) == (Band.PRODUCTION, 7, 50)


def test_constraints_in_takes_a_list_and_exists_no_value():
    doc = copy.deepcopy(MINIMAL)
    doc["jobs"][0]["constraints"] = [
        {"key": "zone", "op": "in", "value": ["a", "b"]},
        {"key": "ssd", "op": "exists", "soft": True},
    ]
    constraints = snapshot_from_json(doc).jobs["/alice/train"].constraints
    assert [(c.op, c.value, c.soft) for c in constraints] == [
        (ConstraintOp.IN, ("a", "b"), False),
        (ConstraintOp.EXISTS, None, True),
    ]


def with_(path, value):
    """MINIMAL with one field set (``path`` like ``jobs.0.resources``); ``...`` deletes it."""
    doc = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is ...:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    "doc, message",
    [
        (with_("now_ms", ...), "now_ms: required"),
        (with_("now_ms", -1), "now_ms: expected a non-negative integer"),
        (with_("config.max_building_tasks", "8"), "config.max_building_tasks: expected a non-negative integer"),
        (with_("config.budget_defaults", {"max_band": "gold"}), "config.budget_defaults.max_band: expected one of"),
        (
            with_("budgets", [{"user": "a", "budget_limit": 1}, {"user": "a", "budget_limit": 2}]),
            "budgets[1].user: duplicate user 'a'",
        ),
        (with_("budgets", [{"user": "a"}]), "budgets[0].budget_limit: required"),
        (with_("workers.0.cpu_millicores", 1.5), "workers[0].cpu_millicores: expected a non-negative integer"),
        (with_("workers.0.device", {"type": "gpu", "variant": "h100"}), "workers[0].device.count: required"),
        (with_("workers.0.device", {"type": "fpga"}), "workers[0].device.type: expected one of cpu|gpu|tpu"),
        (with_("workers.0.attributes", {"zone": 1}), "workers[0].attributes.zone: expected a string"),
        (with_("workers.0.attributes", {"zone": "a", "rack": True}), "workers[0].attributes.rack: expected a string"),
        (with_("workers.0.device", {"type": "cpu", "count": 2}), "workers[0].device: a cpu device has no variant"),
        (with_("workers.0.colour", "red"), "workers[0].colour: unknown field"),
        (with_("jobs.1.id", "alice/x"), "jobs[1].id: expected a job id like /user/name"),
        (with_("jobs.1.id", "/alice/train"), "jobs[1].id: duplicate job id '/alice/train'"),
        (with_("jobs.1.parent", "/alice/other"), "jobs[1].parent: expected '/alice/train'"),
        (with_("jobs.0.parent", "/alice"), "jobs[0].parent: expected None"),
        (with_("jobs.0.band", "gold"), "jobs[0].band: expected one of system|production|interactive|batch"),
        (with_("jobs.0.replicas", 0), "jobs[0].replicas: expected an integer >= 1"),
        (
            with_("jobs.0.resources", {"device": {"type": "gpu", "variant": "h100", "count": -2}}),
            "jobs[0].resources.device.count: expected a non-negative integer",
        ),
        (with_("jobs.0.coscheduling", {}), "jobs[0].coscheduling.group_by: expected a non-empty string"),
        (
            with_("jobs.0.constraints", [{"key": "z", "op": "in", "value": "a"}]),
            "jobs[0].constraints[0].value: expected a list",
        ),
        (
            with_("jobs.0.constraints", [{"key": "z", "op": "exists", "value": "a"}]),
            "jobs[0].constraints[0].value: 'exists' takes no value",
        ),
        (
            with_("jobs.0.constraints", [{"key": "z", "op": "lt", "value": "a"}]),
            "jobs[0].constraints[0].op: expected one of eq|ne|in|exists",
        ),
        (with_("tasks", [{"id": "/alice/train/2"}]), "tasks[0].id: index 2 out of range"),
        (with_("tasks", [{"id": "/bob/x/0"}]), "tasks[0].id: no job '/bob/x'"),
        (with_("tasks", [{"id": "/alice/train/x"}]), "tasks[0].id: expected <job id>/<index>"),
        (with_("tasks", [{"id": "/alice/train/0", "state": "napping"}]), "tasks[0].state: expected one of pending|"),
        (with_("tasks", [{"id": "/alice/train/0", "worker": "w1"}]), "tasks[0].worker: a pending task has no worker"),
        (
            with_("tasks", [{"id": "/alice/train/0", "state": "running", "worker": "w9"}]),
            "tasks[0].worker: no worker 'w9'",
        ),
        (with_("tasks", [{"id": "/alice/train/0"}, {"id": "/alice/train/0"}]), "tasks[1].id: duplicate task id"),
        (
            {"now_ms": 0, "jobs": [{"id": "/a/b/c"}]},
            "jobs[0].band: omitted, and parent job '/a/b' is not in the snapshot",
        ),
        ([], "snapshot: expected an object"),
        (with_("scale_groups", [{"name": "p", "variant": "v5p-8"}]), "scale_groups[0].zone: required"),
        (
            with_("scale_groups", [{"name": "p", "variant": "v", "zone": "z", "chips_per_host": 0}]),
            "scale_groups[0].chips_per_host: expected an integer >= 1",
        ),
        (
            with_("scale_groups", [{"name": "p", "variant": "v", "zone": "z", "size": 2}]),
            "scale_groups[0].size: unknown field",
        ),
    ],
)
def test_errors_name_the_json_path_of_the_bad_field(doc, message):
    with pytest.raises(SnapshotError) as error:
        snapshot_from_json(doc)
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)


def test_a_snapshot_round_trips_through_json():
    snapshot = snapshot_from_json(generate(pending=300, workers=40, seed=3))
    assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot


def test_scale_groups_round_trip_and_are_written_only_when_there_are_any():
    without = snapshot_from_json(generate(pending=20, workers=4, seed=5))
    assert "scale_groups" not in snapshot_to_json(without)
    groups = (GroupSpec("v5p-pool", "v5p-8", "us-east5-a", 0, 3, 2, 4),)
    with_groups = replace(without, scale_groups=groups)
    written = snapshot_to_json(with_groups)
    assert written["scale_groups"] == [
        {
            "name": "v5p-pool",
            "variant": "v5p-8",
            "zone": "us-east5-a",
            "min_slices": 0,
            "max_slices": 3,
            "hosts_per_slice": 2,
            "chips_per_host": 4,
        }
    ]
    assert snapshot_from_json(written) == with_groups


def test_snapshot_json_lists_only_tasks_with_history():
    snapshot = cluster([worker("w")], [job("/a/j", replicas=3)], [running("/a/j/1", "w", band="batch")])
    assert snapshot_to_json(snapshot)["tasks"] == [
        {
            "id": "/a/j/1",
            "state": "running",
            "worker": "w",
            "band": "batch",
            "preemption_count": 0,
            "unfinished_attempt_worker": None,
        }
    ]


def test_finished_tasks_left_out_of_a_snapshot_are_written_as_finished_and_decide_the_same():
    full = cluster([worker("w")], [job("/a/j", replicas=3, cpu=2)], [running("/a/j/0", "w")])
    partial = ClusterSnapshot(
        full.now_ms, full.config, full.budgets, full.workers, full.jobs, (full.tasks[0], full.tasks[2])
    )
    doc = snapshot_to_json(partial)
    assert {"id": "/a/j/1", "state": "succeeded"}.items() <= doc["tasks"][1].items()
    assert decision_to_json(decide(snapshot_from_json(doc))) == decision_to_json(decide(partial))


def test_decision_json_has_exactly_the_documented_shape():
    doc = decision_to_json(decide(snapshot_from_json(generate(pending=200, workers=30, seed=1))))
    assert list(doc) == [
        "spend",
        "effective_bands",
        "order",
        "assignments",
        "preemptions",
        "unschedulable",
        "pending_reasons",
        "queue",
        "after",
        "jobs_after",
    ]
    assert set(doc["assignments"][0]) == {"task", "worker", "band"}
    assert set(doc["preemptions"][0]) == {"victim", "preemptor", "worker"}
    assert set(next(iter(doc["after"].values()))) == {"state", "worker", "band", "preemption_count"}
    assert set(doc["effective_bands"].values()) <= {"system", "production", "interactive", "batch"}
    assert all(isinstance(text, str) for text in doc["pending_reasons"].values())
    assert sorted(t for tasks in doc["queue"].values() for t in tasks) == sorted(doc["pending_reasons"])


def test_decision_json_sorts_task_keys_by_job_then_numeric_index():
    snapshot = cluster([worker("w", healthy=False)], [job("/a/j", replicas=11)], max_tasks_per_job_per_cycle=0)
    doc = decision_to_json(decide(snapshot))
    assert list(doc["effective_bands"])[-3:] == ["/a/j/8", "/a/j/9", "/a/j/10"]


def test_the_same_snapshot_gives_the_same_json_decision():
    doc = generate(pending=500, workers=50, seed=7)
    first = decision_to_json(decide(snapshot_from_json(doc)))
    second = decision_to_json(decide(snapshot_from_json(copy.deepcopy(doc))))
    assert first == second


def test_decision_json_from_the_jobs_task_ids_is_the_sorted_one():
    # "/a/j-x" sorts after "/a/j" as a job though "-" < "/" in a string; "/a/j/10" after "/a/j/9".
    jobs = [
        job("/a/j", replicas=11),
        job("/a/j-x", replicas=2),
        job("/a/j/child", replicas=3),
        job("/b/k", replicas=12),
    ]
    snapshot = snapshot_from_json(snapshot_to_json(cluster([worker("w", cpu=4)], jobs, max_tasks_per_job_per_cycle=0)))
    decision = decide(snapshot)
    doc = decision_to_json(decision, snapshot)
    assert doc == decision_to_json(decision)
    keys = list(doc["effective_bands"])
    assert keys == sorted(keys, key=task_sort_key) and keys.index("/a/j/10") < keys.index("/a/j-x/0")
    assert list(doc["after"]) == sorted(doc["after"], key=task_sort_key)
    # Tasks not listed job by job in index order: their ids are formatted in order instead.
    shuffled = replace(snapshot, tasks=snapshot.tasks[::-1])
    assert _task_order(shuffled) == _task_order(snapshot)
    assert decision_to_json(decision, shuffled) == doc
    # Jobs that do not hold every task of the decision: the maps are sorted instead.
    assert decision_to_json(decision, replace(snapshot, jobs={"/b/k": snapshot.jobs["/b/k"]})) == doc
    # As many effective bands as tasks in the order, one of them for a task not in it: sorted too.
    bands = dict(decision.effective_bands)
    del bands["/a/j/3"]
    bands["/z/z/0"] = Band.BATCH
    names = _band_names(bands, _task_order(snapshot))
    assert list(names.items()) == [(task, bands[task].wire) for task in sorted(bands, key=task_sort_key)]
    assert list(names)[-1] == "/z/z/0"


def test_the_task_order_is_the_snapshots_own_ids_in_sorted_order():
    snapshot = snapshot_from_json(
        {
            "now_ms": NOW,
            "jobs": [{"id": "/b/k", "replicas": 2}, {"id": "/a/j", "replicas": 11}, {"id": "/a/j-x"}],
            "tasks": [{"id": "/a/j/3", "state": "killed"}],
        }
    )
    order = _task_order(snapshot)
    assert order == [*(f"/a/j/{i}" for i in range(11)), "/a/j-x/0", "/b/k/0", "/b/k/1"]
    own = {id(task.id) for task in snapshot.tasks}
    assert all(id(task_id) in own for task_id in order)


def test_a_plain_cpu_device_reads_as_the_shared_cpu_device():
    doc = copy.deepcopy(MINIMAL)
    doc["workers"] = [
        {"id": "w1", "cpu_millicores": 1, "memory_bytes": 1, "device": {"type": "cpu"}},
        {"id": "w2", "cpu_millicores": 1, "memory_bytes": 1, "device": {"type": "cpu", "variant": None, "count": 0}},
        {"id": "w3", "cpu_millicores": 1, "memory_bytes": 1},
    ]
    assert all(w.device is CPU_DEVICE for w in snapshot_from_json(doc).workers)


def test_the_reader_lists_tasks_as_the_render_may_take_unchecked():
    # simulate renders with tasks_by_job=True (the layout check skipped): every snapshot the
    # reader builds must list its jobs' tasks job by job, in index order, listed or not.
    snapshot = snapshot_from_json(
        {
            "now_ms": NOW,
            "workers": [{"id": "w", "cpu_millicores": 8000, "memory_bytes": 8 << 30}],
            "jobs": [
                {"id": "/b/k", "replicas": 3},
                {"id": "/a/j", "replicas": 11},
                {"id": "/a/j/c", "replicas": 2},
                {"id": "/a/j-x"},
            ],
            "tasks": [
                {"id": "/a/j/10", "state": "running", "worker": "w"},
                {"id": "/b/k/2", "state": "killed"},
                {"id": "/a/j/3", "state": "running", "worker": "w"},
                {"id": "/a/j/c/1", "state": "succeeded"},
            ],
        }
    )
    expected = [(job.id, index) for job in snapshot.jobs.values() for index in range(job.replicas)]
    assert [(task.job_id, task.index) for task in snapshot.tasks] == expected
    assert _task_order(snapshot, tasks_by_job=True) == _task_order(snapshot)
    decision = decide(snapshot)
    assert decision_to_json(decision, snapshot, tasks_by_job=True) == decision_to_json(decision)


def test_snapshots_off_the_common_shape_read_as_in_order_checks_give():
    # Each job and task here leaves the inline fast path (a band spelled otherwise, inherited,
    # an explicit parent or root time, a float-free but unusual device), and must read the same.
    doc = {
        "now_ms": NOW,
        "workers": [
            {"id": "w1", "cpu_millicores": 8000, "memory_bytes": 8 << 30, "device": {"type": "cpu", "count": 0.0}},
            {
                "id": "g1",
                "cpu_millicores": 8000,
                "memory_bytes": 8 << 30,
                "device": {"type": "gpu", "variant": "a100", "count": 2},
            },
        ],
        "jobs": [
            {"id": "/alice/train", "band": "BATCH", "replicas": 2, "submitted_at_ms": 5},
            {"id": "/alice/train/eval", "parent": "/alice/train"},
            {
                "id": "/alice/train/eval/x",
                "root_submitted_at_ms": 1,
                "resources": {"device": {"type": "gpu", "count": 1}},
            },
        ],
        "tasks": [{"id": "/alice/train/1", "state": "running", "worker": "g1", "band": "Batch"}],
    }
    snapshot = snapshot_from_json(doc)
    assert [w.device.count for w in snapshot.workers] == [0, 2]
    train, evaluation, leaf = (snapshot.jobs[j] for j in ("/alice/train", "/alice/train/eval", "/alice/train/eval/x"))
    assert (train.band, evaluation.band, leaf.band) == (Band.BATCH,) * 3
    assert (evaluation.root_submitted_at_ms, leaf.root_submitted_at_ms) == (5, 1)
    assert leaf.resources.device.type is DeviceType.GPU and leaf.resources.device.count == 1
    assert snapshot.tasks[1].band is Band.BATCH and snapshot.tasks[1].worker == "g1"


def test_a_job_that_states_its_parent_takes_the_fast_path_and_a_wrong_parent_is_refused():
    from scheduler.core.wire.read import _job_fast

    item = {"id": "/alice/train", "band": "batch", "parent": None, "replicas": 2}
    job = _job_fast("/alice/train", item, {"/alice/train": (0, item)}, {}, {}, {}, {})
    assert job is not None and job.parent is None and job.replicas == 2
    child = {"id": "/alice/train/eval", "band": "batch", "parent": "/alice/train"}
    parsed = {"/alice/train": (0, item), "/alice/train/eval": (1, child)}
    assert _job_fast("/alice/train/eval", child, parsed, {}, {}, {}, {}).parent == "/alice/train"
    wrong = {**child, "parent": "/alice/other"}
    assert _job_fast("/alice/train/eval", wrong, parsed, {}, {}, {}, {}) is None  # the slow path says why
    with pytest.raises(SnapshotError, match=r"jobs\[1\]\.parent: expected '/alice/train'"):
        snapshot_from_json({"now_ms": 0, "jobs": [item, wrong]})


def test_repeated_requests_devices_and_constraint_lists_are_read_once_and_shared():
    request = {
        "cpu_millicores": 2000,
        "memory_bytes": 1 << 30,
        "device": {"type": "gpu", "variant": "h100", "count": 1},
    }
    constraints = [{"key": "zone", "op": "in", "value": ["a", "b"]}]
    gpu = {"type": "gpu", "variant": "h100", "count": 8}
    doc = {
        "now_ms": NOW,
        "workers": [
            {"id": f"g{i}", "cpu_millicores": 8000, "memory_bytes": 8 << 30, "device": dict(gpu)} for i in range(3)
        ],
        "jobs": [
            {"id": f"/a/j{i}", "band": "batch", "resources": dict(request), "constraints": copy.deepcopy(constraints)}
            for i in range(3)
        ],
    }
    snapshot = snapshot_from_json(doc)
    jobs = list(snapshot.jobs.values())
    assert len({id(j.resources) for j in jobs}) == 1 and len({id(j.constraints) for j in jobs}) == 1
    assert jobs[0].resources.device.count == 1 and jobs[0].constraints[0].value == ("a", "b")
    assert len({id(w.device) for w in snapshot.workers}) == 1 and snapshot.workers[0].device.count == 8
    # A later job or worker whose value differs is checked on its own, and its error names it.
    doc["jobs"][2]["resources"]["device"] = {"type": "gpu", "variant": "h100", "count": -1}
    with pytest.raises(SnapshotError, match=r"^jobs\[2\]\.resources\.device\.count: expected a non-negative integer"):
        snapshot_from_json(doc)
    doc["jobs"][2]["resources"] = dict(request)
    doc["jobs"][1]["constraints"] = [{"key": "zone", "op": "in", "value": "a"}]
    with pytest.raises(SnapshotError, match=r"^jobs\[1\]\.constraints\[0\]\.value: expected a list"):
        snapshot_from_json(doc)
    doc["jobs"][1]["constraints"] = constraints
    doc["workers"][1]["device"] = {"type": "gpu", "variant": "h100"}
    with pytest.raises(SnapshotError, match=r"^workers\[1\]\.device\.count: required"):
        snapshot_from_json(doc)


def test_a_value_json_cannot_spell_takes_the_in_order_checks():
    # orjson cannot write a set: the fast path gives up and the field's own check names it.
    with pytest.raises(SnapshotError, match=r"^jobs\[0\]\.resources\.cpu_millicores: expected a non-negative"):
        snapshot_from_json(with_("jobs.0.resources", {"cpu_millicores": {1}}))


def test_a_child_read_after_its_parent_inherits_its_band_on_the_fast_path():
    from scheduler.core.wire.read import _job_fast

    parent = {"id": "/alice/train", "band": "batch"}
    child = {"id": "/alice/train/eval"}
    parsed = {"/alice/train": (0, parent), "/alice/train/eval": (1, child)}
    bands = {}
    assert _job_fast("/alice/train", parent, parsed, bands, {}, {}, {}).band is Band.BATCH
    assert _job_fast("/alice/train/eval", child, parsed, bands, {}, {}, {}).band is Band.BATCH
    # Before its parent is read, the child is left to the in-order checks (which resolve it).
    assert _job_fast("/alice/train/eval", child, parsed, {}, {}, {}, {}) is None
    assert snapshot_from_json({"now_ms": 0, "jobs": [child, parent]}).jobs["/alice/train/eval"].band is Band.BATCH


def test_the_readers_jobs_workers_and_tasks_are_the_constructors_whatever_the_key_strings():
    # The fast paths build JobSpec and TaskSnapshot inline and look fields up by the parsed
    # document's own key strings (orjson's, not the literals'): the objects are the
    # constructors' (every slot set, the class itself), read from orjson or from plain dicts.
    import orjson

    from scheduler.core.types import JobSpec, Resources, TaskSnapshot, WorkerSpec

    doc = {
        "now_ms": 0,
        "workers": [{"id": "w", "cpu_millicores": 1, "memory_bytes": 2, "attributes": {"zone": "a"}}],
        "jobs": [
            {"id": "/a/j", "band": "batch", "replicas": 3, "submitted_at_ms": 5, "max_retries_failure": 1},
            {"id": "/a/j/c", "scheduling_deadline_ms": 9, "resources": {"cpu_millicores": 7}},
        ],
        "tasks": [{"id": "/a/j/1", "state": "running", "worker": "w", "band": "batch", "preemption_count": 2}],
    }
    for parsed in (doc, orjson.loads(orjson.dumps(doc))):
        snapshot = snapshot_from_json(parsed)
        parent, child = snapshot.jobs.values()
        assert (type(parent), type(child), type(snapshot.workers[0])) == (JobSpec, JobSpec, WorkerSpec)
        assert parent == JobSpec(
            id="/a/j", user="a", band=Band.BATCH, parent=None, submitted_at_ms=5, root_submitted_at_ms=5, replicas=3,
            max_retries_failure=1,
        )  # fmt: skip
        assert child == JobSpec(
            id="/a/j/c", user="a", band=Band.BATCH, parent="/a/j", submitted_at_ms=0, root_submitted_at_ms=5,
            resources=Resources(cpu_millicores=7), scheduling_deadline_ms=9,
        )  # fmt: skip
        assert snapshot.workers[0] == WorkerSpec(id="w", cpu_millicores=1, memory_bytes=2, attributes={"zone": "a"})
        assert {type(task) for task in snapshot.tasks} == {TaskSnapshot}
        assert snapshot.tasks == (
            TaskSnapshot("/a/j/0", "/a/j", 0),
            TaskSnapshot("/a/j/1", "/a/j", 1, TaskState.RUNNING, "w", Band.BATCH, 2),
            TaskSnapshot("/a/j/2", "/a/j", 2),
            TaskSnapshot("/a/j/c/0", "/a/j/c", 0),
        )


def test_fields_are_looked_up_by_the_first_items_key_strings():
    from scheduler.core.wire.columns import as_parsed

    first = {"".join(["i", "d"]): 1, "band": 2}
    spelled = as_parsed([first, {"id": 3}], ("id", "state"))
    assert spelled == ("id", "state") and spelled[0] is next(iter(first))
    assert as_parsed([], ("id",)) == ("id",) and as_parsed([["id"]], ("id",)) == ("id",)

    class Key(str):
        pass

    spelled = as_parsed([{Key("id"): 1}], ("id",))
    assert spelled == ("id",) and type(spelled[0]) is str
