"""Instructions one ``decide`` (or one whole ``manage.py simulate``) executes, under Valgrind.

Usage (from the repository root; ``valgrind`` on the PATH)::

    python benchmarks/count_instructions.py decide TREE SNAPSHOT.json     # one decide
    python benchmarks/count_instructions.py simulate TREE SNAPSHOT.json   # the whole process
    python benchmarks/count_instructions.py decide-only TREE SNAPSHOT.json  # one decide, one run

On a shared host CPU time moves with everybody else's load (the same decision has taken
0.37 s and 0.72 s of CPU on this machine within an hour); the number of instructions a run
executes does not. ``decide`` mode runs a process that reads the snapshot and decides it once,
then one that decides it twice, each under ``valgrind --tool=cachegrind --cache-sim=no``, and
prints the difference: the instructions of one ``decide``, without the read. ``simulate`` mode
counts ``TREE/manage.py simulate SNAPSHOT`` once, interpreter start and output included. Hash
randomisation is fixed (``PYTHONHASHSEED=0``) so that two runs of one tree give the same count
to within a few parts in ten thousand. Instructions are not time (a cache miss costs more than
an addition), so this tells a change's effect apart from the host's drift; the timings stay
the target. Each run takes about 30 times as long as without Valgrind.

``decide-only`` counts the same decide (the second, after one that warms the same caches) in one
run under ``valgrind --tool=callgrind --instr-atstart=no``: the process switches instrumentation
on right before it and off right after (``callgrind_control -i on|off`` on its own pid), so the
read runs at Valgrind's uninstrumented speed. A count takes a third to a quarter of the two
cachegrind runs, and agrees with ``decide`` to within 0.2% (the toggles' own few instructions
are counted).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

DECIDE_N = """
import sys
import orjson
sys.path.insert(0, sys.argv[1])
from scheduler.core.decision import decide
from scheduler.core.wire import snapshot_from_json
with open(sys.argv[2], "rb") as f:
    snapshot = snapshot_from_json(orjson.loads(f.read()))
for _ in range(int(sys.argv[3])):
    decide(snapshot)
"""

DECIDE_ONLY = """
import os
import subprocess
import sys
import orjson
sys.path.insert(0, sys.argv[1])
from scheduler.core.decision import decide
from scheduler.core.wire import snapshot_from_json
with open(sys.argv[2], "rb") as f:
    snapshot = snapshot_from_json(orjson.loads(f.read()))
decide(snapshot)
pid = str(os.getpid())
subprocess.run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL, check=True)
decide(snapshot)
subprocess.run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL, check=True)
"""


def count_decide_only(tree: str, snapshot: str) -> int:
    """Instructions of one ``decide`` (the second) under callgrind, instrumented alone."""
    return _valgrind_count(
        [
            "--tool=callgrind",
            "--instr-atstart=no",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            DECIDE_ONLY,
            tree,
            snapshot,
        ],
        r"Collected\s*:\s*(\d+)",
    )


def count(argv: list[str], cwd: str | None = None) -> int:
    """Instructions executed by ``argv`` under cachegrind (its ``I refs`` line)."""
    return _valgrind_count(
        ["--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *argv], r"I\s+refs:\s+([\d,]+)", cwd
    )


def _valgrind_count(args: list[str], total: str, cwd: str | None = None) -> int:
    """Run valgrind with ``args`` (hash seed fixed) and read the count its ``total`` pattern finds."""
    proc = subprocess.run(
        ["valgrind", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    found = re.search(total, proc.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("decide", "decide-only", "simulate"))
    parser.add_argument("tree", help="the source tree (a checkout or a git archive of one)")
    parser.add_argument("snapshot", help="a snapshot JSON file")
    args = parser.parse_args(argv)
    tree, snapshot = os.path.abspath(args.tree), os.path.abspath(args.snapshot)
    if args.mode == "simulate":
        total = count([sys.executable, os.path.join(tree, "manage.py"), "simulate", snapshot], cwd=tree)
        print(f"simulate {snapshot} in {tree}: {total:,} instructions")
        return 0
    if args.mode == "decide-only":
        print(
            f"decide {snapshot} in {tree}: {count_decide_only(tree, snapshot):,} instructions (callgrind, decide alone)"
        )
        return 0
    once, twice = (count([sys.executable, "-c", DECIDE_N, tree, snapshot, str(n)]) for n in (1, 2))
    print(f"decide {snapshot} in {tree}: {twice - once:,} instructions (read + 1: {once:,}; read + 2: {twice:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
