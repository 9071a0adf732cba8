"""Time ``POST /api/v1/uplifts/<id>:preview`` on PostgreSQL, on the synthetic cluster after a
tick: cold (this process has parsed nothing of the newest tick) and warm, with SQL statement
counts, for the downgraded users with the most tasks queued in BATCH (an unlimited grant each).

Usage (from the repository root; needs a PostgreSQL server)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_preview27_bench \\
      .venv/bin/python benchmarks/bench_uplift_preview.py            # 100k pending x 10k workers
    .venv/bin/python benchmarks/bench_uplift_preview.py --sizes 10000x1000 --requests 10
    .venv/bin/python benchmarks/bench_uplift_preview.py --reuse     # keep the restored cluster

The benchmark database is dropped, recreated and filled by ``benchmarks/restore.py`` as for
``bench_console.py`` (``--reuse`` keeps it and runs one more tick). Requests go through
Django's test client (middleware, DRF, the view) with an admin's API token. "cold" is the first
request of each grant after the board's cache is emptied (it parses the queue and the what-if
basis and reads the band's job specs); the median and p90 are of the requests that follow;
"cpu ms" is the median process time of the warm requests. The reference loop and the load
average are printed first: the machine is shared, so compare runs by them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = [(100_000, 10_000)]
TARGET_WARM_MS = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="PENDINGxWORKERS, e.g. 100000x10000")
    parser.add_argument("--requests", type=int, default=10, help="warm requests per grant after the first")
    parser.add_argument("--users", type=int, default=3, help="grants to preview (the most downgraded users)")
    parser.add_argument("--reuse", action="store_true", help="keep the database a previous run restored")
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES

    from benchmarks.bench_tick import open_bench_database

    open_bench_database(recreate=not args.reuse)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from benchmarks.bench_console import measure
    from benchmarks.bench_decision import reference_seconds
    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.board.read import forget as forget_board
    from scheduler.board.read import queue_index
    from scheduler.budgets.writes import request_uplift
    from scheduler.core.bands import Band
    from scheduler.core.wire import snapshot_from_json
    from scheduler.foundation.roles import ensure_groups
    from scheduler.models import ApiToken, UpliftGrant
    from scheduler.store import clock
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick.run import forget_decision, run_tick

    admins, _ = ensure_groups()
    admin, _ = get_user_model().objects.get_or_create(username="bench-admin")
    admin.groups.add(admins)
    _, token = ApiToken.objects.create(user=admin, name="bench")
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")

    print(f"# reference loop: {reference_seconds():.3f} s; load average: {os.getloadavg()[0]:.2f}")
    print(
        "| pending | workers | user | queued | moved | starting | preemptible | status | cold ms | "
        "warm median ms | warm p90 ms | warm cpu ms | SQL | at target |"
    )
    print("|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for pending, workers in sizes:
        if not args.reuse:
            snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
            restore_snapshot(snapshot)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            now_ms = snapshot.now_ms
            del snapshot
        else:
            now_ms = clock.now_ms()
        forget_cluster_rows()
        started = time.perf_counter()
        outcome = run_tick(now_ms)
        print(f"# tick {outcome.tick_id}: {outcome.assigned} assigned, {time.perf_counter() - started:.2f} s")
        # The web process holds no copy of the cluster, as in production (see bench_console.py).
        forget_cluster_rows()
        forget_decision()
        gc.collect()
        index = queue_index()
        batch = int(Band.BATCH)
        downgraded: dict[str, int] = {}
        for owner, requested in zip(index.owner.get(batch, []), index.requested.get(batch, []), strict=True):
            if requested == int(Band.INTERACTIVE):
                downgraded[owner] = downgraded.get(owner, 0) + 1
        chosen = sorted(downgraded, key=lambda u: (-downgraded[u], u))[: args.users]
        for user in chosen:
            UpliftGrant.objects.filter(user_id=user, state=UpliftGrant.State.REQUESTED).delete()
            subject, _ = get_user_model().objects.get_or_create(username=user)
            grant = request_uplift(admin, user=user, budget_limit=0, reason="bench", duration_seconds=3600)
            path = f"/api/v1/uplifts/{grant.pk}:preview"
            forget_board()
            measured = measure(connection, api, "POST", path, {}, args.requests)
            body = json.loads(measured.content)
            moved = len(body.get("tasks", []))
            print(
                f"| {pending:,} | {workers:,} | {user} | {moved + body.get('unchanged', 0)} | {moved} | "
                f"{body.get('starting')} | {body.get('preemptible')} | {measured.status} | {measured.cold_ms:.1f} | "
                f"{measured.warm_ms:.1f} | {measured.p90_ms:.1f} | {measured.cpu_ms:.1f} | "
                f"{measured.statements} | {'yes' if measured.warm_ms <= TARGET_WARM_MS else 'NO'} |",
                flush=True,
            )
            grant.delete()


if __name__ == "__main__":
    main()
