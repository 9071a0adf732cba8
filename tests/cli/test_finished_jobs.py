"""``iris job explain`` and ``iris job show`` of a finished job (issue 23): the band it ran as,
never "downgraded", and each finished task's band and worker from its last attempt."""

from __future__ import annotations

from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus
from scheduler.core.bands import Band
from scheduler.execution.attempts import apply_reports
from scheduler.models import Job, UserBudget
from tests.personas import make_worker, run_tasks


def test_a_finished_job_explains_the_band_it_ran_as_and_shows_where_its_tasks_ran(iris):
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    iris.use_token("alice")
    assert iris("job", "run", "--name", "done", "--replicas", "2", "--", "true").code == 0
    done = Job.objects.get(name="/alice/done")
    run_tasks(done, make_worker("slice-a-2"))
    apply_reports(
        [
            AttemptReport(AttemptRef(t.pk, 1), AttemptStatus.SUCCEEDED, exit_code=0, worker="slice-a-2")
            for t in done.tasks.all()
        ]
    )
    assert iris("job", "run", "--name", "big", "--cpu", "8", "--memory", "32Gi", "--", "x").code == 0
    run_tasks(Job.objects.get(name="/alice/big"), make_worker("w-big", cpu=64, memory_gib=512))  # over budget now

    explained = iris("job", "explain", "/alice/done")
    shown = iris("job", "show", "/alice/done")

    assert explained.code == 0, explained.err
    assert "downgraded" not in explained.out
    assert "ran as          INTERACTIVE" in explained.out
    assert "2 ran as INTERACTIVE" in explained.out
    task_lines = [line.split() for line in explained.out.splitlines() if line.startswith("/alice/done/")]
    assert [(w[1], w[2], w[3]) for w in task_lines] == [("succeeded", "INTERACTIVE", "slice-a-2")] * 2
    assert shown.code == 0, shown.err
    rows = [line.split() for line in shown.out.split("Tasks:")[1].splitlines()[2:] if line.strip()]
    assert [(r[1], r[2], r[3]) for r in rows] == [("succeeded", "INTERACTIVE", "slice-a-2")] * 2
