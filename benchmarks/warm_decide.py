"""``decide``'s CPU inside a warm tick process against the same snapshot decided elsewhere.

Runs ``bench_tick.py`` (same arguments, same environment: ``IRIS_REDIS_URL``,
``IRIS_BENCH_DATABASE_URL``) with the tick's ``decide`` wrapped: every decide's CPU is printed.
At the burst tick (the first tick after ``bench_tick``'s spread churn) the same snapshot is
decided again in the warm process (``again``), then over a copy whose task snapshots are
rebuilt in the tuple's order (``compact``: new objects allocated one after the other, with the
copy's own CPU), then over an in-process pickle copy (``pickle-copy``: every object of the
snapshot rebuilt). Each re-decision is checked equal to the tick's (SHA-256 of its ``repr``).
``--dump FILE`` pickles the burst's (snapshot, decision) (pickle keeps the loader's object
sharing); ``--replay FILE`` decides it in a fresh process, a few times::

    IRIS_REDIS_URL=redis://127.0.0.1:6379/2 IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_x \\
      .venv/bin/python benchmarks/warm_decide.py --dump /tmp/burst.pkl --sizes 100000x10000 --ticks first second churn burst unchanged
    .venv/bin/python benchmarks/warm_decide.py --replay /tmp/burst.pkl

The re-decisions run inside the burst tick, so that tick's own figures in ``bench_tick``'s
table are not comparable (its decide column includes them); ``--no-extra`` leaves them out.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import pickle
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _digest(decision) -> str:
    return hashlib.sha256(repr(decision).encode()).hexdigest()[:16]


def _compact(snapshot):
    """The snapshot with every task snapshot rebuilt, in the tuple's order."""
    from dataclasses import replace

    from scheduler.core.types import task_snapshot

    started = time.process_time()
    tasks = tuple(
        [
            task_snapshot(
                t.id, t.job_id, t.index, t.state, t.worker, t.band, t.preemption_count, t.unfinished_attempt_worker
            )
            for t in snapshot.tasks
        ]
    )
    print(f"# compact copy of {len(tasks):,} task snapshots: cpu {time.process_time() - started:.3f} s", flush=True)
    return replace(snapshot, tasks=tasks)


def replay(path: str, runs: int) -> None:
    from scheduler.core.decision import decide

    with open(path, "rb") as f:
        snapshot, decision = pickle.load(f)
    expected = _digest(decision)
    del decision
    gc.collect()
    for run in range(1, runs + 1):
        started = time.process_time()
        decided = decide(snapshot)
        cpu = time.process_time() - started
        print(f"replay {run}: decide cpu {cpu:.3f} s, same decision: {_digest(decided) == expected}", flush=True)
        del decided


def warm(dump: str | None, extra: bool) -> None:
    import benchmarks.bench_tick as bench_tick

    state = {"burst": False, "n": 0}
    open_database = bench_tick.open_bench_database

    def opened(*args, **kwargs):
        # Django is set up only once the bench database is chosen: wrap then.
        result = open_database(*args, **kwargs)
        import benchmarks.restore as restore
        import scheduler.tick.run as run

        churn, decide = restore.churn, run.decide

        def churned(*a, **k):
            if k.get("spread"):
                state["burst"] = True
            return churn(*a, **k)

        def timed(snapshot):
            state["n"] += 1
            started = time.process_time()
            decision = decide(snapshot)
            cpu = time.process_time() - started
            print(f"# decide {state['n']} in the tick: cpu {cpu:.3f} s, {len(snapshot.tasks):,} tasks", flush=True)
            if state["burst"]:
                state["burst"] = False
                if dump:
                    with open(dump, "wb") as f:
                        pickle.dump((snapshot, decision), f, protocol=5)
                if extra:
                    expected = _digest(decision)
                    for name, make in (
                        ("again", lambda: snapshot),
                        ("compact", lambda: _compact(snapshot)),
                        ("again", lambda: snapshot),
                        ("pickle-copy", lambda: pickle.loads(pickle.dumps(snapshot, protocol=5))),
                    ):
                        other = make()
                        started = time.process_time()
                        decided = decide(other)
                        cpu = time.process_time() - started
                        same = _digest(decided) == expected
                        print(f"# burst decided {name}: cpu {cpu:.3f} s, same decision: {same}", flush=True)
                        del decided, other
            return decision

        restore.churn = churned
        run.decide = timed
        return result

    bench_tick.open_bench_database = opened
    bench_tick.main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replay", metavar="FILE", help="decide a dumped burst snapshot in this fresh process")
    parser.add_argument("--runs", type=int, default=3, help="replays")
    parser.add_argument("--dump", metavar="FILE", help="pickle the burst tick's snapshot and decision here")
    parser.add_argument("--no-extra", action="store_true", help="no re-decisions inside the burst tick")
    args, rest = parser.parse_known_args()
    if args.replay:
        replay(args.replay, args.runs)
        return
    sys.argv = [os.path.join(ROOT, "benchmarks", "bench_tick.py"), *rest]
    warm(args.dump, not args.no_extra)


if __name__ == "__main__":
    main()
