"""Compare ``manage.py simulate`` of two source trees as whole processes, alternately.

Usage (from the repository root)::

    git -C . archive main | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    python ../shared/perf/gen_snapshot.py --pending 100000 --workers 10000 --users 1000 \\
        --running 30000 --seed 1 --out var/bench/indep.json
    python benchmarks/ab_simulate.py /tmp/before . var/bench/indep.json --rounds 5

Each round runs ``python manage.py simulate FILE`` once in each tree (the order alternating
round by round), with this interpreter, output to a file. It prints each run's wall time and
CPU time (user + system of the child, from ``wait4``), the medians, whether the two trees'
outputs are byte-identical, the load average and the reference loop of ``bench_decision.py``
before and after. On a shared host the CPU time is the figure to compare; the wall time is
what the target is stated in.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run_once(tree: str, snapshot: str, out_path: str) -> tuple[float, float]:
    """(wall s, CPU s) of one ``manage.py simulate`` in ``tree``."""
    with open(out_path, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, os.path.join(tree, "manage.py"), "simulate", os.path.abspath(snapshot)],
            cwd=tree,
            stdout=out,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"simulate failed in {tree}")
    return wall, usage.ru_utime + usage.ru_stime


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("snapshot")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from benchmarks.bench_decision import reference_seconds

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# load average {load}; reference loop {reference_seconds():.3f} s")
    print("| round | tree | wall s | cpu s |")
    print("|---:|---|---:|---:|")
    trees = {"before": args.before, "after": args.after}
    results: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    hashes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for name in order:
                out_path = os.path.join(tmp, f"{name}.json")
                wall, cpu = run_once(trees[name], args.snapshot, out_path)
                results[name].append((wall, cpu))
                hashes[name] = digest(out_path)
                print(f"| {r + 1} | {name} | {wall:.3f} | {cpu:.3f} |", flush=True)
    for name in ("before", "after"):
        walls = [w for w, _ in results[name]]
        cpus = [c for _, c in results[name]]
        print(
            f"# {name}: median wall {statistics.median(walls):.3f} s (min {min(walls):.3f}), "
            f"median cpu {statistics.median(cpus):.3f} s (min {min(cpus):.3f}); output sha256 {hashes[name][:16]}"
        )
    print(f"# outputs byte-identical: {hashes['before'] == hashes['after']}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# load average {load}; reference loop {reference_seconds():.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
