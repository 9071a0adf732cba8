"""Hashes that show a refactoring left the scheduling decisions byte-identical.

Usage (from the repository root)::

    .venv/bin/python benchmarks/decision_hashes.py                     # core only, no database
    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_x \\
        .venv/bin/python benchmarks/decision_hashes.py --through-rows    # and through the rows

For each benchmark snapshot (``benchmarks/synthetic.py`` and ``benchmarks/squatters.py`` at
``squat_share=0.5``, 10,000 pending x 1,000 workers, and ``/work/shared/perf/gen_snapshot.py``'s
10,000 x 1,000 x 100 users x 3,000 running, seed 1, when that file exists) it prints the SHA-256
of ``decision_to_json(decide(snapshot))``. With ``--through-rows`` the snapshot is also written as
rows (``benchmarks/restore.py``), read back by the tick's loader (``tick/load.load_snapshot``:
the job-row mapper, routes, budgets) and the hashes of the loaded snapshot
(``snapshot_to_json``) and of its decision are printed too: the path the tick takes. The
database named by ``IRIS_BENCH_DATABASE_URL`` is dropped and recreated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PERF_GENERATOR = "/work/shared/perf/gen_snapshot.py"
PENDING, WORKERS = 10_000, 1_000


def _documents() -> list[tuple[str, dict]]:
    from benchmarks import squatters, synthetic

    docs = [
        ("synthetic 10000x1000 seed 0", synthetic.generate(pending=PENDING, workers=WORKERS, seed=0)),
        (
            "squatters 0.5 10000x1000 seed 0",
            squatters.generate(pending=PENDING, workers=WORKERS, seed=0, squat_share=0.5),
        ),
    ]
    if os.path.exists(PERF_GENERATOR):
        out = subprocess.run(
            [sys.executable, PERF_GENERATOR, "--pending", "10000", "--workers", "1000", "--users", "100"]
            + ["--running", "3000", "--seed", "1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        docs.append(("gen_snapshot 10000x1000 u100 r3000 seed 1", json.loads(out)))
    return docs


def _sha(document: dict) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--through-rows", action="store_true", help="also write each snapshot as rows and reload it")
    args = parser.parse_args()

    from scheduler.core.decision import decide
    from scheduler.core.wire import snapshot_from_json
    from scheduler.core.wire.write import decision_to_json, snapshot_to_json

    if args.through_rows:
        from benchmarks.bench_tick import open_bench_database

        open_bench_database()

    for name, document in _documents():
        snapshot = snapshot_from_json(document)
        print(f"{name}: decision {_sha(decision_to_json(decide(snapshot)))}", flush=True)
        if not args.through_rows:
            continue
        from django.db import transaction

        from benchmarks.restore import restore_snapshot
        from scheduler.store.cluster_rows import forget_cluster_rows
        from scheduler.tick.load import load_snapshot

        restore_snapshot(snapshot)
        forget_cluster_rows()
        with transaction.atomic():
            loaded = load_snapshot(snapshot.now_ms)
        forget_cluster_rows()
        print(f"{name}: loaded snapshot {_sha(snapshot_to_json(loaded.snapshot))}", flush=True)
        print(f"{name}: loaded decision {_sha(decision_to_json(decide(loaded.snapshot)))}", flush=True)
        print(f"{name}: routes {_sha(sorted(loaded.routes.items()) if loaded.routes else [])}", flush=True)


if __name__ == "__main__":
    main()
