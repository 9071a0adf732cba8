"""Argument parsing and one thin handler per command.

A handler turns arguments into one or two API requests and returns ``(answer, renderer)``;
``main`` prints the raw answer with ``--json`` or the renderer's text otherwise. Exit codes:
0 on success, 1 for any error the server (or the network) reports, 2 for usage errors.
Errors go to stderr as the server's ``CODE: message``.
"""

from __future__ import annotations

import argparse
import difflib
import getpass
import json
import os
import re
import socket
import sys
from collections.abc import Callable
from typing import Any

from iris_cli import formatting as fmt
from iris_cli.arguments import BANDS, FILTER_HELP, UPLIFT_STATES, UsageError, band_name, budget_points, constraint, cores, default_job_name, device, drop_none, duration, job_path, memory, non_negative_int, positive_int
from iris_cli import status
from iris_cli.client import (
    DEFAULT_SERVER,
    CliError,
    Session,
    credentials_path,
    normalize_server,
    read_credentials,
    write_credentials,
)

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# A command's handler: the request's answer and how to render it.
Handler = Callable[[Session, argparse.Namespace], tuple[Any, Callable[[Any], str]]]

# --- handlers --------------------------------------------------------------------------------------


def cmd_login(session: Session, args: argparse.Namespace):
    stored = read_credentials()
    server = getattr(args, "server", None) or ask("Server", os.environ.get("IRIS_SERVER") or stored.get("server") or DEFAULT_SERVER)
    username = args.username or ask("Username", stored.get("username") or getpass.getuser())
    password = args.password if args.password is not None else getpass.getpass("Password: ")
    session = Session(server=normalize_server(server))
    # Each login mints a new token named for this machine, which `iris token list` shows.
    body = {"username": username, "password": password, "name": f"iris CLI on {socket.gethostname()}"[:100]}
    answer = session.request("POST", "tokens/", body, auth=False)
    path = write_credentials(session.server, answer["token"], answer.get("username") or username)
    safe = {k: v for k, v in answer.items() if k != "token"}
    message = (
        f"Logged in to {session.server} as {answer.get('username') or username} ({answer.get('role', '?')}). "
        f"Token saved to {path}."
    )
    if os.environ.get("IRIS_TOKEN"):
        message += "\nNote: IRIS_TOKEN is set in this shell and overrides the saved token."
    return {**safe, "server": session.server, "credentials": str(path)}, lambda _: message


def cmd_logout(session: Session, args: argparse.Namespace):
    """Revoke the saved token on its server, then forget it. A server that cannot be reached
    leaves the token valid until it expires; logout says so and forgets it anyway."""
    path = credentials_path()
    stored = read_credentials()
    existed = path.exists()
    revoked, note = None, ""
    if stored.get("server") and stored.get("token"):
        saved = Session(server=normalize_server(stored["server"]), token=stored["token"])
        try:
            saved.request("DELETE", "tokens/current")
            revoked = True
        except CliError as exc:
            if exc.code in ("UNAUTHENTICATED", "NOT_FOUND"):
                revoked, note = True, " (the server no longer accepted it)"
            else:
                revoked = False
                note = (
                    f"\nWarning: could not revoke the token on {saved.server} ({exc.message}); it stays valid until "
                    "it expires: revoke it with `iris token revoke ID` after logging in again."
                )
    path.unlink(missing_ok=True)
    if not existed:
        text = "Not logged in (no credentials file)."
    elif revoked:
        text = f"Revoked the token on {stored['server']}{note} and removed {path}."
    else:
        text = f"Removed {path}.{note}"
    return {"removed": str(path) if existed else None, "revoked": revoked}, lambda _: text


def cmd_token_list(session: Session, args: argparse.Namespace):
    tokens = session.get("tokens/", user=args.user)
    return tokens, lambda rows: fmt.table(rows, [
        ("ID", lambda r: r["id"]), ("USER", lambda r: r["username"]), ("NAME", lambda r: r["name"]),
        ("CREATED", lambda r: r["created_at"]), ("EXPIRES", lambda r: r["expires_at"]),
        ("", lambda r: "(this one)" if r.get("current") else ""),
    ])


def cmd_token_revoke(session: Session, args: argparse.Namespace):
    not_found = CliError("NOT_FOUND", f"token {args.id} not found among your tokens; `iris token list` shows their ids")
    try:
        session.request("DELETE", f"tokens/{args.id.strip()}")
    except CliError as exc:
        if exc.code == "NOT_FOUND":
            raise not_found from None
        raise
    return {"revoked": args.id}, lambda _: f"Revoked token {args.id}."


def cmd_whoami(session: Session, args: argparse.Namespace):
    return session.get("me/"), fmt.me


def cmd_job_run(session: Session, args: argparse.Namespace):
    body = drop_none(
        {
            "name": args.name or default_job_name(args.command),
            "parent": args.parent.strip("/") if args.parent else None,
            "priority": args.priority,
            "system_reason": args.system_reason,
            "replicas": args.replicas,
            "cpu": args.cpu,
            "memory": args.memory,
            "device": args.gpu or args.tpu,
            "group_by": args.group_by,
            "constraints": (args.constraint or []) + (args.prefer or []) or None,
            "scheduling_timeout_seconds": args.scheduling_timeout,
            "max_retries_preemption": args.max_retries_preemption,
            "max_retries_failure": args.max_retries_failure,
            "command": args.command,
            "argv": args.argv,
        }
    )
    job = session.post("jobs/", body)

    def render(job: dict) -> str:
        ident = fmt.job_id(job)
        warnings = fmt.pick(job, "warnings", default=[]) or []
        return (
            f"Submitted {ident}: {fmt.band(fmt.pick(job, 'band', 'priority'))}, "
            f"{fmt.cell(fmt.pick(job, 'replicas'))} task(s), {fmt.cell(fmt.pick(job, 'state'))}.\n"
            + "".join(f"Warning: {warning}\n" for warning in warnings)
            + f"Why it waits or where it runs: iris job explain {ident}"
        )

    return job, render


# Jobs per POST jobs:batch unless --batch-size says otherwise: the server's default
# IRIS_MAX_JOBS_PER_BATCH. A server with a lower limit says so, and the rest goes in its size.
DEFAULT_BATCH_SIZE = 1000


def read_job_lines(file) -> list[tuple[int, dict]]:
    """``(line number, job body)`` of each non-blank line of a JSON Lines file; one that is not a
    JSON object stops everything before anything is sent."""
    jobs = []
    for number, line in enumerate(file, start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise CliError("INVALID_ARGUMENT", f"{file.name} line {number}: not JSON ({exc}); nothing was submitted") from None
        if not isinstance(body, dict):
            raise CliError("INVALID_ARGUMENT", f"{file.name} line {number}: expected a JSON object (a job, as the "
                                               f"body of POST jobs/); nothing was submitted")
        jobs.append((number, body))
    if not jobs:
        raise CliError("INVALID_ARGUMENT", f"{file.name}: no jobs in it; nothing was submitted")
    return jobs


def cmd_job_submit(session: Session, args: argparse.Namespace):
    """``iris job submit -f jobs.jsonl``: every line a job, sent by POST jobs:batch in chunks of
    the batch limit. Each chunk is all or nothing; the first refused chunk stops the rest, and the
    jobs of the chunks before it stay submitted (their ids are printed first)."""
    with args.file:
        items = read_job_lines(args.file)
    size, start, submitted = args.batch_size, 0, []
    while start < len(items):
        chunk = items[start:start + size]
        try:
            answer = session.post("jobs:batch", {"jobs": [body for _, body in chunk]})
        except CliError as exc:
            limit = exc.details.get("limit")
            if exc.code == "RESOURCE_EXHAUSTED" and exc.details.get("field") == "jobs" and isinstance(limit, int) \
                    and 0 < limit < len(chunk):
                size = limit  # the server's IRIS_MAX_JOBS_PER_BATCH is lower: resend in its size
                continue
            raise refused_lines(exc, args.file.name, chunk, submitted, getattr(args, "json", False)) from None
        submitted += answer.get("jobs", [])
        start += len(chunk)
    return {"count": len(submitted), "jobs": submitted}, fmt.submitted_jobs


def refused_lines(exc: CliError, name: str, chunk: list[tuple[int, dict]], submitted: list, as_json: bool) -> CliError:
    """The error of a refused chunk, its items named by their lines in the file. The jobs already
    submitted are printed (stdout) before it."""
    if submitted:
        answer = {"count": len(submitted), "jobs": submitted}
        print(fmt.as_json(answer) if as_json else fmt.submitted_jobs(answer))
    errors = exc.details.get("errors") if isinstance(exc.details, dict) else None
    lines = []
    for error in errors if isinstance(errors, list) else []:
        index = error.get("index") if isinstance(error, dict) else None
        if isinstance(index, int) and 0 <= index < len(chunk):
            lines.append(f"  {name} line {chunk[index][0]}: {error.get('code')}: {error.get('message')}")
    index = exc.details.get("index") if isinstance(exc.details, dict) else None
    where = f"{name} line {chunk[index][0]}: " if isinstance(index, int) and 0 <= index < len(chunk) else ""
    rest = f"nothing from {name} line {chunk[0][0]} on was submitted"
    if len(lines) > 1:
        print("\n".join(lines[1:]), file=sys.stderr)
    return CliError(exc.code, f"{where}{exc.message} ({rest})", exc.details, exc.status)


# Jobs per request when `iris job list --all` follows the pages (the API's largest page).
JOB_PAGE_SIZE = 500


def cmd_job_list(session: Session, args: argparse.Namespace):
    query = {**dict(args.filter or []), "user": args.user, "band": args.band, "state": args.state}
    if args.page and args.cursor:
        raise UsageError("give --page or --cursor, not both")
    if not args.all:
        return session.get("jobs/", **query, sort=args.sort, page=args.page, cursor=args.cursor), fmt.job_list
    # Every matching job: follow the keyset pages' cursors to the end, as one page holding them all.
    page = session.get("jobs/", **query, sort=args.sort, page_size=JOB_PAGE_SIZE)
    jobs = list(page.get("results", []))
    while page.get("next"):
        page = session.get("jobs/", **query, sort=args.sort, page_size=JOB_PAGE_SIZE,
                           cursor=fmt.query_value(page["next"], "cursor"))
        jobs.extend(page.get("results", []))
    return {"count": len(jobs), "next": None, "previous": None, "results": jobs}, fmt.job_list


def filter_item(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of the jobs table's filter; the server validates keys and values."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. state=pending), got {text!r}")
    return key.strip(), value.strip()


def cmd_job_show(session: Session, args: argparse.Namespace):
    return session.get(job_path(args.job)), fmt.job_detail


def cmd_job_explain(session: Session, args: argparse.Namespace):
    return session.get(job_path(args.job) + ":explain"), fmt.explanation


def cmd_job_cancel(session: Session, args: argparse.Namespace):
    if args.filter or len(args.jobs) != 1:
        return cancel_many(session, args)
    answer = session.post(job_path(args.jobs[0]) + ":cancel")

    def render(a: dict) -> str:
        jobs, tasks = fmt.pick(a, "killed_jobs", default=[]), fmt.pick(a, "killed_tasks")
        extra = f" with {len(jobs) - 1} descendant job(s)" if len(jobs) > 1 else ""
        return f"Cancelled {fmt.job_id(a)}{extra}" + (f": {tasks} task(s) killed." if tasks is not None else ".")

    return answer, render


def cancel_many(session: Session, args: argparse.Namespace):
    """``iris job cancel A B ...`` or ``--filter KEY=VALUE ...``: count first (a dry run), then
    cancel once confirmed (``--yes``, or ``y`` at the prompt in a terminal)."""
    if args.filter and args.jobs:
        raise UsageError("give job ids or --filter, not both")
    if not args.filter and not args.jobs:
        raise UsageError("give a job id, several, or --filter KEY=VALUE")
    selection = {"filter": dict(args.filter)} if args.filter else {"ids": list(args.jobs)}
    preview = session.post("jobs:cancel", {**selection, "dry_run": True})
    jobs, tasks = fmt.pick(preview, "jobs", default=0), fmt.pick(preview, "tasks", default=0)
    if not jobs:
        return preview, lambda a: "Nothing to cancel: no unfinished job matches."
    selected = fmt.pick(preview, "selected_count", default=jobs)
    extra = jobs - selected if isinstance(selected, int) else 0
    summary = f"{selected:,} job(s){f' and {extra:,} descendant job(s)' if extra > 0 else ''} and {tasks:,} task(s)"
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError("NOT_CONFIRMED", f"this would cancel {summary}; nothing cancelled: add --yes")
        answer = input(f"Cancel {summary}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise CliError("NOT_CONFIRMED", "nothing cancelled")
    done = session.post("jobs:cancel", selection)

    def render(a: dict) -> str:
        selected, killed = fmt.pick(a, "selected_count", default=0), fmt.pick(a, "jobs", default=0)
        descendants = f" and {killed - selected:,} descendant job(s)" if killed > selected else ""
        return f"Cancelled {selected:,} job(s){descendants}: {fmt.pick(a, 'tasks')} task(s) killed."

    return done, render


def cmd_queue(session: Session, args: argparse.Namespace):
    return session.get("queue/", band=args.band, user=args.user, job=args.job, page=args.page), fmt.queue


def cmd_budget_show(session: Session, args: argparse.Namespace):
    user = args.user or whoami(session)
    return session.get(f"budgets/{user}"), fmt.budget


def cmd_budget_list(session: Session, args: argparse.Namespace):
    return session.get("budgets/"), fmt.budget_list


def cmd_uplift_request(session: Session, args: argparse.Namespace):
    if args.max_band is None and args.budget_limit is None:
        raise UsageError("give --max-band and/or --budget-limit: what should the uplift raise?")
    body = drop_none(
        {
            "user": args.user,
            "max_band": args.max_band,
            "budget_limit": args.budget_limit,
            "reason": args.reason,
            "duration_seconds": args.duration,
        }
    )
    grant = session.post("uplifts/", body)
    return grant, lambda g: f"Requested uplift {fmt.cell(fmt.pick(g, 'id'))}; an admin will approve or deny it.\n\n" + fmt.uplift(g)


def cmd_uplift_list(session: Session, args: argparse.Namespace):
    return session.get("uplifts/", user=args.user, state=args.state, page=args.page), fmt.uplift_list


def cmd_admin_budget_set(session: Session, args: argparse.Namespace):
    if args.limit is None and args.max_band is None:
        raise UsageError("give --limit and/or --max-band")
    # The server keeps a value the request leaves out.
    body = drop_none({"budget_limit": args.limit, "max_band": args.max_band, "reason": args.reason,
                      "create_user_budget": True if args.new_user else None})
    return session.put(f"budgets/{args.user}", body), lambda b: "Budget set.\n\n" + fmt.budget(b)


def cmd_admin_uplift_approve(session: Session, args: argparse.Namespace):
    body = drop_none({"duration_seconds": args.duration, "note": args.note or ""})
    return session.post(f"uplifts/{args.id}:approve", body), lambda g: "Approved.\n\n" + fmt.uplift(g)


def cmd_admin_uplift_deny(session: Session, args: argparse.Namespace):
    return session.post(f"uplifts/{args.id}:deny", {"note": args.note or ""}), lambda g: "Denied.\n\n" + fmt.uplift(g)


def cmd_admin_audit(session: Session, args: argparse.Namespace):
    return session.get("audit/", page=args.page), fmt.audit_list


def cmd_tick(session: Session, args: argparse.Namespace):
    return session.post("ticks/"), fmt.tick


# Pages ``iris worker list --all`` asks for at once (the server's largest page).
WORKER_PAGE_SIZE = 500


def cmd_worker_list(session: Session, args: argparse.Namespace):
    if not args.all:
        return session.get("workers/", page=args.page), fmt.worker_list
    # Every worker: follow the pages until the last, and answer as one page holding them all.
    first = session.get("workers/", page_size=WORKER_PAGE_SIZE)
    workers = list(first.get("results", []))
    page = first
    number = 1
    while page.get("next"):
        number += 1
        page = session.get("workers/", page=number, page_size=WORKER_PAGE_SIZE)
        workers.extend(page.get("results", []))
    return {"count": len(workers), "next": None, "previous": None, "results": workers}, fmt.worker_list


def cmd_worker_drain(session: Session, args: argparse.Namespace):
    worker = session.post(f"workers/{args.name}:drain")
    return worker, lambda w: f"Draining {fmt.cell(fmt.pick(w, 'name', default=args.name))}: it takes no new tasks."


def cmd_worker_undrain(session: Session, args: argparse.Namespace):
    worker = session.post(f"workers/{args.name}:undrain")
    return worker, lambda w: f"Undrained {fmt.cell(fmt.pick(w, 'name', default=args.name))}: it takes new tasks again."


def whoami(session: Session) -> str:
    if session.username and not os.environ.get("IRIS_TOKEN"):
        return session.username
    me = session.get("me/")
    return fmt.pick(me, "username", "user", default="")


def ask(label: str, default: str) -> str:
    answer = input(f"{label} [{default}]: ").strip()
    return answer or default


# --- the parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # Accepted after any command (`iris job list --json`) as well as before it. SUPPRESS keeps a
    # subcommand's default from overwriting a value given earlier on the line.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's raw JSON")
    common.add_argument("--server", default=argparse.SUPPRESS, metavar="URL", help="server URL (default: IRIS_SERVER or the saved login)")

    parser = argparse.ArgumentParser(
        prog="iris",
        parents=[common],
        description="Submit work to Iris and ask why it runs where it runs.",
        epilog="Log in once with `iris login`; IRIS_SERVER and IRIS_TOKEN override the saved login.",
    )
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)

    def command(parent, name: str, handler: Handler | None, help: str, **kwargs) -> argparse.ArgumentParser:
        p = parent.add_parser(name, parents=[common], help=help, description=help, **kwargs)
        if handler:
            p.set_defaults(handler=handler, command_parser=p)
        return p

    def group(name: str, help: str, parent=sub) -> argparse._SubParsersAction:
        p = parent.add_parser(name, help=help, description=help)
        return p.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)

    p = command(sub, "login", cmd_login, "log in and save a token to ~/.config/iris/credentials.json")
    p.add_argument("--username", help="default: asked, proposing your login name")
    p.add_argument("--password", help="default: asked without echo (avoid on shared machines: it lands in shell history)")
    command(sub, "logout", cmd_logout, "revoke the saved token on the server and forget it")
    tokens = group("token", "list and revoke your API tokens (one per device or purpose)")
    p = command(tokens, "list", cmd_token_list, "your live API tokens")
    p.add_argument("--user", help="another user's tokens, or '*' for everyone's (admins)")
    p = command(tokens, "revoke", cmd_token_revoke, "revoke one of your API tokens by its id")
    p.add_argument("id", help="the token's id, as `iris token list` shows it")
    command(sub, "whoami", cmd_whoami, "who the server thinks you are, and your role")

    jobs = group("job", "submit, list, inspect and cancel jobs")
    p = command(
        jobs,
        "run",
        cmd_job_run,
        "submit a job that runs CMD",
        usage="iris job run [options] -- CMD [ARG ...]",
        epilog="Constraints: KEY=VALUE, KEY!=VALUE, KEY=A,B (one of), KEY (attribute exists).",
    )
    p.add_argument("--name", help="job name (default: the program's name and the time); the id is /<you>/<name>")
    p.add_argument("--parent", metavar="JOB", help="submit as a child of JOB (it bills to JOB's root submitter)")
    p.add_argument("--priority", type=band_name, choices=BANDS, help="band (default: interactive for a root job, the parent's for a child)")
    p.add_argument("--system-reason", metavar="R", help="why SYSTEM is needed; must mention hero, finelog or iris")
    p.add_argument("--replicas", type=positive_int, metavar="N", help="number of tasks (default 1)")
    p.add_argument("--cpu", type=cores, metavar="C", help="CPU cores per task (e.g. 2 or 0.5)")
    p.add_argument("--memory", type=memory, metavar="M", help="memory per task, with its unit: 512Mi, 16Gi, 8G (4096B for bytes)")
    accel = p.add_mutually_exclusive_group()
    accel.add_argument("--gpu", type=device("gpu", count_required=True), metavar="VARIANT:COUNT", help="GPUs per task, e.g. h100:8 (auto:8 for any variant)")
    accel.add_argument("--tpu", type=device("tpu", count_required=False), metavar="VARIANT:COUNT",
                       help="TPU chips per task, e.g. v5p-8:4 (the slice type, then the chips each task uses)")
    p.add_argument("--group-by", metavar="ATTR", help="place all tasks at once on workers sharing this attribute (gang)")
    p.add_argument("--constraint", type=constraint(soft=False), action="append", metavar="KEY=VALUE", help="hard constraint on worker attributes (repeatable)")
    p.add_argument("--prefer", type=constraint(soft=True), action="append", metavar="KEY=VALUE", help="soft constraint: preferred, not required (repeatable)")
    p.add_argument("--scheduling-timeout", type=duration, metavar="DURATION", help="give up if not scheduled within this time (e.g. 30m)")
    p.add_argument("--max-retries-preemption", type=non_negative_int, metavar="N")
    p.add_argument("--max-retries-failure", type=non_negative_int, metavar="N")

    p = command(jobs, "submit", cmd_job_submit, "submit many jobs (a sweep) from a JSON Lines file, all or nothing per batch",
                epilog="Each line is one job, a JSON object as the body of POST /api/v1/jobs/, e.g. "
                       '{"name": "sweep-1", "command": ["python", "train.py", "--lr=0.1"], "replicas": 2}.')
    p.add_argument("-f", "--file", required=True, type=argparse.FileType("r", encoding="utf-8"), metavar="FILE",
                   help="the jobs, one JSON object per line ('-' reads standard input)")
    p.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"jobs per request (default {DEFAULT_BATCH_SIZE}; lowered to the server's limit if it has a lower one)")

    p = command(jobs, "list", cmd_job_list, "list jobs")
    p.add_argument("--user", metavar="U")
    p.add_argument("--band", type=band_name, choices=BANDS)
    p.add_argument("--state", metavar="S", help="pending, running, succeeded, failed, killed, ...")
    p.add_argument("--filter", type=filter_item, action="append", metavar="KEY=VALUE",
                   help=f"more filters (repeatable): {FILTER_HELP}")
    p.add_argument("--sort", metavar="COLUMN", help="name, user, band, effective, state, route, tasks, submitted; --sort=-COLUMN for descending")
    p.add_argument("--page", type=positive_int, metavar="N", help="page N (within the first 10,000 jobs; deeper: --cursor)")
    p.add_argument("--cursor", metavar="C", help="the page a previous listing's 'next: --cursor C' points to")
    p.add_argument("--all", action="store_true", help="every matching job (follows the pages)")
    for name, handler, help in [
        ("show", cmd_job_show, "a job with its tasks and attempts"),
        ("explain", cmd_job_explain, "why a job runs where it runs, or why it waits"),
    ]:
        command(jobs, name, handler, help).add_argument("job", metavar="JOB", help="job id, e.g. /alice/train")
    p = command(jobs, "cancel", cmd_job_cancel, "cancel jobs and their children: ids, or every job a filter matches")
    p.add_argument("jobs", nargs="*", metavar="JOB", help="job id(s), e.g. /alice/train")
    p.add_argument("--filter", type=filter_item, action="append", metavar="KEY=VALUE",
                   help=f"cancel every unfinished job matching all of these (repeatable): {FILTER_HELP}")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (needed when not in a terminal)")

    p = command(sub, "queue", cmd_queue, "pending tasks per effective band, in scheduling order")
    p.add_argument("--band", type=band_name, choices=BANDS)
    p.add_argument("--user", metavar="U")
    p.add_argument("--job", metavar="JOB")
    p.add_argument("--page", type=positive_int, metavar="N")

    budgets = group("budget", "read budgets")
    command(budgets, "show", cmd_budget_show, "a user's effective budget and spend (default: yours)").add_argument("user", nargs="?", metavar="USER")
    command(budgets, "list", cmd_budget_list, "every user with a budget row, an open uplift or spend")

    uplifts = group("uplift", "ask for a temporary raise of your max band or budget")
    p = command(uplifts, "request", cmd_uplift_request, "request an uplift (an admin approves it)")
    p.add_argument("--max-band", type=band_name, choices=BANDS, help="the band you need to submit at")
    p.add_argument("--budget-limit", type=budget_points, metavar="N", help="the limit you need, in points (0 = unlimited)")
    p.add_argument("--reason", required=True, metavar="R")
    p.add_argument("--duration", required=True, type=duration, metavar="DURATION", help="e.g. 2h, 1d")
    p.add_argument("--user", metavar="U", help="request for another user (admins)")
    p = command(uplifts, "list", cmd_uplift_list, "uplift requests and grants")
    p.add_argument("--user", metavar="U")
    p.add_argument("--state", choices=UPLIFT_STATES)
    p.add_argument("--page", type=positive_int, metavar="N")

    admin = group("admin", "admin verbs: budgets, uplift decisions, the audit log")
    admin_budget = group("budget", "set budgets", parent=admin)
    p = command(admin_budget, "set", cmd_admin_budget_set, "set a user's budget row (a value left out keeps its current value)")
    p.add_argument("user", metavar="USER")
    p.add_argument("--limit", type=budget_points, metavar="N", help="resource-value points, 0 = unlimited")
    p.add_argument("--max-band", type=band_name, choices=BANDS)
    p.add_argument("--reason", required=True, metavar="R")
    p.add_argument("--new-user", action="store_true",
                   help="USER is new (no account, budget, grant or job yet): create the budget on purpose")
    admin_uplift = group("uplift", "approve or deny uplift requests", parent=admin)
    p = command(admin_uplift, "approve", cmd_admin_uplift_approve, "approve a request; it starts now")
    p.add_argument("id", metavar="ID")
    p.add_argument("--duration", type=duration, metavar="DURATION", help="override the requested duration")
    p.add_argument("--note", metavar="N")
    p = command(admin_uplift, "deny", cmd_admin_uplift_deny, "deny a request")
    p.add_argument("id", metavar="ID")
    p.add_argument("--note", metavar="N")
    command(admin, "audit", cmd_admin_audit, "who changed which budget or grant, when and why").add_argument("--page", type=positive_int, metavar="N")

    command(sub, "tick", cmd_tick, "run one scheduling tick now (operators)")
    workers = group("worker", "list, drain and undrain workers (operators)")
    p = command(workers, "list", cmd_worker_list, "workers with capacity and health, by name")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--page", type=positive_int, metavar="N")
    shown.add_argument("--all", action="store_true", help="every worker (follows the pages)")
    command(workers, "drain", cmd_worker_drain, "stop placing new tasks on a worker").add_argument("name", metavar="NAME")
    command(workers, "undrain", cmd_worker_undrain, "place new tasks on a drained worker again").add_argument("name", metavar="NAME")
    status.add_commands(group("scheduler", "the scheduler's state, like Slurm's sdiag (operators)"), command)
    return parser


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Everything after the first ``--`` is the job's command, passed through untouched."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def value_options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options, of every command, that take a value."""
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= value_options(sub)
        elif action.nargs != 0 and action.option_strings:
            found.update(o for o in action.option_strings if o.startswith("--"))
    return found


NEGATIVE = re.compile(r"^-\d")


def join_negative_values(options: list[str], takes_value: set[str]) -> list[str]:
    """``--memory -5Gi`` -> ``--memory=-5Gi``: argparse reads ``-5Gi`` as an unknown option and
    says only "expected one argument"; joined, the option's own check explains what is wrong."""
    joined: list[str] = []
    for item in options:
        if joined and NEGATIVE.match(item) and joined[-1] in takes_value:
            joined[-1] = f"{joined[-1]}={item}"
        else:
            joined.append(item)
    return joined


def unrecognized(args: argparse.Namespace, extras: list[str]) -> str:
    """argparse's "unrecognized arguments", with what was probably meant: the flag a misspelt one
    is closest to, and for ``iris job run python x.py`` the ``--`` that was forgotten."""
    parser: argparse.ArgumentParser = args.command_parser
    known = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})
    lines = [f"unrecognized arguments: {' '.join(extras)}"]
    for extra in extras:
        if extra.startswith("--"):
            flag = extra.split("=", 1)[0]
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            if close:
                lines.append(f"  {flag}: did you mean {close[0]}?")
    if args.handler is cmd_job_run and not extras[0].startswith("-"):
        lines.append(f"  the job's command goes after --: iris job run [options] -- {' '.join(extras)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    options, job_command = split_command(argv)
    options = join_negative_values(options, value_options(parser))
    try:
        args, extras = parser.parse_known_args(options)
        if extras:
            getattr(args, "command_parser", parser).error(unrecognized(args, extras) if hasattr(args, "command_parser")
                                                          else f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # --help (0) or a usage error (2); argparse already printed why
        return int(exc.code or 0)
    if args.handler is cmd_job_run:
        if not job_command:
            print("iris job run: give the command after --, e.g. iris job run -- python train.py", file=sys.stderr)
            return EXIT_USAGE
        args.command = job_command
        args.argv = ["iris", *argv]  # the submission as typed, kept by the server for audit
    elif job_command is not None:
        print(f"iris: unexpected arguments after --: {' '.join(job_command)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        session = Session.from_environment(getattr(args, "server", None))
        answer, render = args.handler(session, args)
    except UsageError as exc:
        print(f"iris: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CliError as exc:
        report(exc, login_hint=args.handler is not cmd_login)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    try:
        print(fmt.as_json(answer) if getattr(args, "json", False) else render(answer))
        sys.stdout.flush()
    except BrokenPipeError:  # `iris ... | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def report(exc: CliError, login_hint: bool) -> None:
    print(f"{exc.code}: {exc.message}", file=sys.stderr)
    fields = exc.details.get("fields") if isinstance(exc.details, dict) else None
    if isinstance(fields, dict) and len(fields) > 1:
        for name, messages in list(fields.items())[1:]:
            print(f"  {name}: {fmt.cell(messages)}", file=sys.stderr)
    if exc.code == "UNAUTHENTICATED" and login_hint and "iris login" not in exc.message:
        print("Run `iris login` to sign in again.", file=sys.stderr)
