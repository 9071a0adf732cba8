"""Argument parsing and one thin handler per command.

A handler turns arguments into one or two API requests and returns ``(answer, renderer)``;
``main`` prints the raw answer with ``--json`` or the renderer's text otherwise. Exit codes:
0 on success, 1 for any error the server (or the network) reports, 2 for usage errors.
Errors go to stderr as the server's ``CODE: message``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from iris_cli import formatting as fmt
from iris_cli.arguments import (
    UsageError,
    default_job_name,
    drop_none,
    job_path,
)
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
    server = getattr(args, "server", None) or ask(
        "Server", os.environ.get("IRIS_SERVER") or stored.get("server") or DEFAULT_SERVER
    )
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
    return tokens, lambda rows: fmt.table(
        rows,
        [
            ("ID", lambda r: r["id"]),
            ("USER", lambda r: r["username"]),
            ("NAME", lambda r: r["name"]),
            ("CREATED", lambda r: r["created_at"]),
            ("EXPIRES", lambda r: r["expires_at"]),
            ("", lambda r: "(this one)" if r.get("current") else ""),
        ],
    )


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
            raise CliError(
                "INVALID_ARGUMENT", f"{file.name} line {number}: not JSON ({exc}); nothing was submitted"
            ) from None
        if not isinstance(body, dict):
            raise CliError(
                "INVALID_ARGUMENT",
                f"{file.name} line {number}: expected a JSON object (a job, as the "
                f"body of POST jobs/); nothing was submitted",
            )
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
        chunk = items[start : start + size]
        try:
            answer = session.post("jobs:batch", {"jobs": [body for _, body in chunk]})
        except CliError as exc:
            limit = exc.details.get("limit")
            if (
                exc.code == "RESOURCE_EXHAUSTED"
                and exc.details.get("field") == "jobs"
                and isinstance(limit, int)
                and 0 < limit < len(chunk)
            ):
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
        page = session.get(
            "jobs/", **query, sort=args.sort, page_size=JOB_PAGE_SIZE, cursor=fmt.query_value(page["next"], "cursor")
        )
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
    return (
        grant,
        lambda g: (
            f"Requested uplift {fmt.cell(fmt.pick(g, 'id'))}; an admin will approve or deny it.\n\n" + fmt.uplift(g)
        ),
    )


def cmd_uplift_list(session: Session, args: argparse.Namespace):
    return session.get("uplifts/", user=args.user, state=args.state, page=args.page), fmt.uplift_list


def cmd_admin_budget_set(session: Session, args: argparse.Namespace):
    if args.limit is None and args.max_band is None:
        raise UsageError("give --limit and/or --max-band")
    # The server keeps a value the request leaves out.
    body = drop_none(
        {
            "budget_limit": args.limit,
            "max_band": args.max_band,
            "reason": args.reason,
            "create_user_budget": True if args.new_user else None,
        }
    )
    return session.put(f"budgets/{args.user}", body), lambda b: "Budget set.\n\n" + fmt.budget(b)


def cmd_admin_uplift_preview(session: Session, args: argparse.Namespace):
    return session.post(f"uplifts/{args.id}:preview", {}), fmt.uplift_preview


def cmd_admin_uplift_approve(session: Session, args: argparse.Namespace):
    """Approve; the text output opens with the preview as it stood just before (none before
    the first tick). ``--json`` prints the grant alone, as before."""
    try:
        preview = None if getattr(args, "json", False) else session.post(f"uplifts/{args.id}:preview", {})
    except CliError as exc:
        if exc.code != "FAILED_PRECONDITION":
            raise
        preview = None  # no tick yet, or already decided: the approval says which
    body = drop_none({"duration_seconds": args.duration, "note": args.note or ""})
    shown = "" if preview is None else "Before approving, the preview said:\n\n" + fmt.uplift_preview(preview) + "\n\n"
    return session.post(f"uplifts/{args.id}:approve", body), lambda g: shown + "Approved.\n\n" + fmt.uplift(g)


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
