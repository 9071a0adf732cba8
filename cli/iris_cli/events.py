"""``iris job watch`` and ``iris job wait``: the event stream (``GET /api/v1/events/``), one line
per event, and a job's end as an exit status. ``watch`` follows it as server-sent events (one
connection, renewed when the server ends it), ``wait`` by long polls.

Both resume from the last event id they saw, so a stream that ended or a long poll that timed
out loses nothing and repeats nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from iris_cli.client import CliError, Session

# Seconds one long poll asks the server to wait (it may cap it lower: IRIS_EVENTS_MAX_WAIT_SECONDS).
POLL_SECONDS = 20

# `iris job wait`: the exit status of each end (0 succeeded; 1 and 2 are errors and usage, as
# for every command; 124 a timeout, as coreutils' `timeout` says it).
EXIT_FOR_OUTCOME = {
    "succeeded": 0,
    "failed": 3,
    "cosched_failed": 3,
    "killed": 4,
    "lost": 5,
    "cancelled": 6,
    "preempted": 7,
    "unschedulable": 8,
}
EXIT_TIMEOUT = 124
END_KINDS = ("finished", "cancelled")
TERMINAL_STATES = ("succeeded", "failed", "killed", "unschedulable", "preempted", "cosched_failed")

# Marks an answer already printed (a stream): main prints nothing more.
STREAMED = object()


def poll(session: Session, since: int | str, wait: float, **filters: Any) -> dict:
    query = {"since": since, "wait": max(0, int(wait)), "limit": 1000, **filters}
    return session.get("events/", **query)


def cmd_job_watch(session: Session, args: argparse.Namespace):
    """Print each event as it arrives; for a job, stop after its end."""
    as_json = getattr(args, "json", False)
    if bool(args.job) == bool(args.user):
        raise CliError("INVALID_ARGUMENT", "give a job id or --user U (one of them)")
    filters = {"job": args.job.strip()} if args.job else {"user": args.user}
    if args.kind:
        filters["kind"] = ",".join(args.kind)
    since: int | str = args.since if args.since is not None else (0 if args.job else "now")
    for event in follow(session, since, **filters):
        print(json.dumps(event, sort_keys=True) if as_json else event_line(event), flush=True)
        if args.job and event["kind"] in END_KINDS and event["job"] == "/" + args.job.strip().strip("/"):
            return STREAMED, None


def follow(session: Session, since: int | str, **filters: Any) -> Iterator[dict]:
    """Every event after ``since`` (an id, or "now") as it arrives, over server-sent event
    streams: when one ends (the server's bound) the next resumes after the last id it gave."""
    last_id = None
    while True:
        query = {"limit": 1000, **filters} if last_id is not None else {"since": since, "limit": 1000, **filters}
        for frame in session.stream("events/", last_event_id=last_id, **query):
            last_id = frame.get("id", last_id)
            if "data" in frame:
                yield json.loads(frame["data"])


def cmd_job_wait(session: Session, args: argparse.Namespace):
    """Wait for a job's end; its outcome becomes the exit status (``args.exit_code``)."""
    job = "/" + args.job.strip().strip("/")
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    since: int | str = 0
    checked = False
    while True:
        left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
        page = poll(session, since, left if checked else 0, job=job, kind=",".join(END_KINDS))
        if page["events"]:
            end = page["events"][-1]
            outcome = "cancelled" if end["kind"] == "cancelled" else end["data"].get("outcome", "failed")
            args.exit_code = EXIT_FOR_OUTCOME.get(outcome, 3)
            return end, lambda e: f"{job} {outcome_text(e)}"
        since = page["next"]
        if not checked:
            # Not ended yet, or ended before the stream kept its events (retention): ask the job.
            detail = session.get("jobs/" + job.lstrip("/"))
            if detail.get("state") in TERMINAL_STATES:
                args.exit_code = EXIT_FOR_OUTCOME[detail["state"]]
                return {"job": job, "outcome": detail["state"]}, lambda a: f"{job} {a['outcome']}"
            checked = True
        if deadline is not None and time.monotonic() >= deadline:
            args.exit_code = EXIT_TIMEOUT
            print(f"iris: {job} had not finished after {args.timeout} s", file=sys.stderr)
            return {"job": job, "outcome": None, "timeout_seconds": args.timeout}, lambda a: f"{job} still running"


def outcome_text(event: dict) -> str:
    if event["kind"] == "cancelled":
        return f"cancelled by {event['data'].get('by')}"
    return event["data"].get("outcome", "finished")


def event_line(event: dict) -> str:
    """One event as a line: its id, time, what it concerns, and what happened."""
    subject = event.get("task") or event.get("job") or f"user {event.get('user')}"
    return f"#{event['id']}  {event['at']}  {subject}  {event['kind']}{describe(event)}"


def describe(event: dict) -> str:
    d = event.get("data") or {}
    kind = event["kind"]
    if kind == "submitted":
        return f" as {d.get('band')} ({d.get('replicas')} task(s))"
    if kind == "queued":
        return f" in {d.get('band')}, position {d.get('position')} of {d.get('of')}"
    if kind in ("downgraded", "repromoted"):
        return f" from {d.get('from_band')} to {d.get('to_band')}"
    if kind in ("started", "running"):
        band = f", {d['band']}" if d.get("band") else ""
        return f" on {d.get('worker')} (attempt {d.get('attempt')}{band})"
    if kind == "preempted":
        return f" on {d.get('worker')} by {d.get('by')} ({d.get('by_band')} over {d.get('band')})"
    if kind == "requeued":
        return f": {d.get('reason')}"
    if kind == "task_finished":
        reason = f": {d['reason']}" if d.get("reason") else ""
        return f" {d.get('outcome')}{reason}"
    if kind == "finished":
        return f" {d.get('outcome')}"
    if kind == "cancelled":
        return f" by {d.get('by')}" + (
            f" (with {d['root']})" if d.get("root") and d["root"] != event.get("job") else ""
        )
    if kind == "limit_crossed":
        return f" {'over' if d.get('over') else 'back within'} the limit ({d.get('spend')} of {d.get('limit')})"
    if kind.startswith("uplift_"):
        return f" (uplift {d.get('uplift')})"
    return ""
