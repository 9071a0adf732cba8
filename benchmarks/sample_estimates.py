"""A black-box sampler of the start estimates a running Iris Web shows, as a user would read them.

Every ``--interval`` seconds for ``--minutes`` it reads the whole queue (``GET /api/v1/queue/``,
every page) and keeps what each pending task showed: its estimate's p50 and p90, method and
as-of. Then it waits ``--settle`` minutes and reads each sampled job (``GET
/api/v1/jobs/<id>``) for its tasks' attempts: a sample is **covered** when the task's next
attempt (the first created after the sample was taken) was created by the p90 shown. A
sample whose task never started by the end is covered only if its p90 is after the end
(otherwise it is a miss); one whose p90 is still ahead and which did not start is left out
(nothing is known yet).

It reports: estimates shown, how many had their p90 more than ``--late-grace`` seconds in the
past when read (the bar: 0), and the share covered (the bar: at least 80%), in all, by method,
and for the first estimate each task was shown. It talks to the server only (it reads no
database), so it measures what a user of the API sees.

    make run DEMO_LOAD=1 &        # or any deployment
    .venv/bin/python benchmarks/sample_estimates.py --server http://127.0.0.1:8000 \\
        --minutes 60 --interval 20 --settle 10 --out benchmarks/results/estimates-sample.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from datetime import datetime


def iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class Client:
    def __init__(self, server: str, token: str | None = None) -> None:
        self.server, self.token = server.rstrip("/"), token

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Token {self.token}")
        for attempt in range(5):
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                if error.code == 404:
                    return {}
                if error.code < 500 and error.code != 429:
                    raise
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                pass
            time.sleep(1 + attempt)
        raise SystemExit(f"{method} {path}: no answer after 5 tries")


def read_queue(client: Client) -> list[dict]:
    entries, page = [], 1
    while True:
        data = client.call("GET", f"/api/v1/queue/?page_size=500&page={page}")
        entries.extend(data.get("results", []))
        if not data.get("next"):
            return entries
        page += 1


def first_attempt_after(job: dict, index: int, after_ms: int) -> int | None:
    """When the task's first attempt created at or after ``after_ms`` (less a second of clock
    slack) was created: the moment the scheduler placed it."""
    for task in job.get("tasks", []):
        if task.get("index") != index:
            continue
        starts = sorted(t for t in (iso_ms(a.get("created_at")) for a in task.get("attempts", [])) if t is not None)
        for start in starts:
            if start >= after_ms - 1000:
                return start
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--username", default="ops")
    parser.add_argument("--password", default="iris-demo")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--interval", type=float, default=20)
    parser.add_argument("--settle", type=float, default=10, help="minutes to wait after sampling before judging")
    parser.add_argument("--late-grace", type=float, default=15, help="seconds a shown p90 may be in the past")
    parser.add_argument("--out", default="", help="write the samples and the summary here (JSON)")
    args = parser.parse_args()

    token = Client(args.server).call(
        "POST", "/api/v1/tokens/", {"username": args.username, "password": args.password, "name": "estimate-sampler"}
    )["token"]
    client = Client(args.server, token)

    samples: list[dict] = []
    began = time.time()
    end = began + args.minutes * 60
    rounds = 0
    while time.time() < end:
        taken = time.time()
        taken_ms = int(taken * 1000)
        for entry in read_queue(client):
            estimate = entry.get("estimated_start")
            samples.append(
                {
                    "at_ms": taken_ms,
                    "task": entry["task"],
                    "job": entry["job"],
                    "band": entry.get("band"),
                    "position": entry.get("position"),
                    "state": entry.get("state"),
                    "p50_ms": iso_ms(estimate.get("p50")) if estimate else None,
                    "p90_ms": iso_ms(estimate.get("p90")) if estimate else None,
                    "method": estimate.get("method") if estimate else None,
                    "as_of_ms": iso_ms(estimate.get("as_of")) if estimate else None,
                    "late": bool(estimate.get("late")) if estimate else False,
                    "reason": entry.get("estimated_start_reason", ""),
                }
            )
        rounds += 1
        print(f"[{datetime.now():%H:%M:%S}] round {rounds}: {len(samples)} samples", file=sys.stderr, flush=True)
        if args.out:  # what has been sampled so far, for a look before the end
            with open(args.out + ".partial", "w") as out:
                json.dump({"samples": samples}, out)
        time.sleep(max(0.0, args.interval - (time.time() - taken)))

    settle_until = time.time() + args.settle * 60
    while time.time() < settle_until:
        time.sleep(min(30.0, max(0.0, settle_until - time.time())))
    judged_at = int(time.time() * 1000)
    jobs = {}
    for job_id in sorted({s["job"] for s in samples}):
        jobs[job_id] = client.call("GET", "/api/v1/jobs/" + urllib.parse.quote(job_id.lstrip("/"), safe="/"))

    summary = judge(samples, jobs, judged_at, args.late_grace * 1000)
    summary.update(
        minutes=args.minutes,
        interval_s=args.interval,
        settle_minutes=args.settle,
        rounds=rounds,
        server=args.server,
        began=datetime.fromtimestamp(began).isoformat(timespec="seconds"),
    )
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"summary": summary, "samples": samples}, out)


def judge(samples: list[dict], jobs: dict[str, dict], judged_at: int, late_grace_ms: float) -> dict:
    shown = [s for s in samples if s["p90_ms"] is not None and s["state"] in (None, "pending")]
    late = [s for s in shown if s["p90_ms"] < s["at_ms"] - late_grace_ms]
    judged: list[tuple[dict, bool]] = []
    # Sharpness, so that a wide estimate does not pass for a good one: of the samples whose task
    # started, how many started by the p50 shown (about half, for a calibrated p50), and how far
    # the p90 lay after the start.
    by_p50: list[bool] = []
    slack_s: list[float] = []
    for s in shown:
        start = first_attempt_after(jobs.get(s["job"], {}), int(s["task"].rsplit("/", 1)[1]), s["at_ms"])
        if start is not None:
            judged.append((s, start <= s["p90_ms"]))
            by_p50.append(start <= s["p50_ms"])
            slack_s.append((s["p90_ms"] - start) / 1000)
        elif s["p90_ms"] < judged_at:
            judged.append((s, False))
    by_method: dict[str, list[bool]] = defaultdict(list)
    for s, covered in judged:
        by_method[s["method"] or "?"].append(covered)
    seen: set[str] = set()
    first: list[bool] = []
    for s, covered in sorted(judged, key=lambda item: item[0]["at_ms"]):
        if s["task"] not in seen:
            seen.add(s["task"])
            first.append(covered)

    def share(values: list[bool]) -> dict:
        return {
            "judged": len(values),
            "covered": sum(values),
            "share": round(sum(values) / len(values), 3) if values else None,
        }

    return {
        "samples": len(samples),
        "tasks": len({s["task"] for s in samples}),
        "estimates_shown": len(shown),
        "p90_in_past": len(late),
        "covered": share([c for _, c in judged]),
        "by_method": {m: share(v) for m, v in sorted(by_method.items())},
        "first_shown": share(first),
        "late_relabelled": sum(1 for s in shown if s["late"]),
        "started_by_p50": share(by_p50),
        "p90_after_start_s": {
            "p10": _quantile(slack_s, 0.1),
            "p50": _quantile(slack_s, 0.5),
            "p90": _quantile(slack_s, 0.9),
        },
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[int(q * (len(ordered) - 1))], 1)


if __name__ == "__main__":
    main()
