"""``iris``: the parser (every command, its options and its handler) and ``main``, which parses,
runs one handler and prints its answer or the error."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from iris_cli import formatting as fmt
from iris_cli.arguments import (
    BANDS,
    FILTER_HELP,
    UPLIFT_STATES,
    UsageError,
    band_name,
    budget_points,
    constraint,
    cores,
    device,
    duration,
    memory,
    non_negative_int,
    positive_int,
)
from iris_cli import status
from iris_cli.events import STREAMED, cmd_job_wait, cmd_job_watch
from iris_cli import notifications
from iris_cli.client import (
    CliError,
    Session,
)
from iris_cli.commands import (
    DEFAULT_BATCH_SIZE,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Handler,
    cmd_admin_audit,
    cmd_admin_budget_set,
    cmd_admin_uplift_approve,
    cmd_admin_uplift_deny,
    cmd_admin_uplift_preview,
    cmd_budget_list,
    cmd_budget_show,
    cmd_job_cancel,
    cmd_job_explain,
    cmd_job_list,
    cmd_job_run,
    cmd_job_show,
    cmd_job_submit,
    cmd_login,
    cmd_logout,
    cmd_queue,
    cmd_tick,
    cmd_token_list,
    cmd_token_revoke,
    cmd_uplift_list,
    cmd_uplift_request,
    cmd_whoami,
    cmd_worker_drain,
    cmd_worker_list,
    cmd_worker_undrain,
    filter_item,
)


# --- the parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # Accepted after any command (`iris job list --json`) as well as before it. SUPPRESS keeps a
    # subcommand's default from overwriting a value given earlier on the line.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's raw JSON")
    common.add_argument(
        "--server",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="server URL (default: IRIS_SERVER or the saved login)",
    )

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
    p.add_argument(
        "--password", help="default: asked without echo (avoid on shared machines: it lands in shell history)"
    )
    command(sub, "logout", cmd_logout, "revoke the saved token on the server and forget it")
    tokens = group("token", "list and revoke your API tokens (one per device or purpose)")
    p = command(tokens, "list", cmd_token_list, "your live API tokens")
    p.add_argument("--user", help="another user's tokens, or '*' for everyone's (admins)")
    p = command(tokens, "revoke", cmd_token_revoke, "revoke one of your API tokens by its id")
    p.add_argument("id", help="the token's id, as `iris token list` shows it")
    command(sub, "whoami", cmd_whoami, "who the server thinks you are, and your role")
    me = group("me", "your own settings")
    p = command(
        me,
        "notifications",
        notifications.cmd_me_notifications,
        "what you are told of by email and webhook, and your newest notifications; options change it",
    )
    notifications.add_arguments(p)

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
    p.add_argument(
        "--priority",
        type=band_name,
        choices=BANDS,
        help="band (default: interactive for a root job, the parent's for a child)",
    )
    p.add_argument("--system-reason", metavar="R", help="why SYSTEM is needed; must mention hero, finelog or iris")
    p.add_argument("--replicas", type=positive_int, metavar="N", help="number of tasks (default 1)")
    p.add_argument("--cpu", type=cores, metavar="C", help="CPU cores per task (e.g. 2 or 0.5)")
    p.add_argument(
        "--memory", type=memory, metavar="M", help="memory per task, with its unit: 512Mi, 16Gi, 8G (4096B for bytes)"
    )
    accel = p.add_mutually_exclusive_group()
    accel.add_argument(
        "--gpu",
        type=device("gpu", count_required=True),
        metavar="VARIANT:COUNT",
        help="GPUs per task, e.g. h100:8 (auto:8 for any variant)",
    )
    accel.add_argument(
        "--tpu",
        type=device("tpu", count_required=False),
        metavar="VARIANT:COUNT",
        help="TPU chips per task, e.g. v5p-8:4 (the slice type, then the chips each task uses)",
    )
    p.add_argument(
        "--group-by", metavar="ATTR", help="place all tasks at once on workers sharing this attribute (gang)"
    )
    p.add_argument(
        "--constraint",
        type=constraint(soft=False),
        action="append",
        metavar="KEY=VALUE",
        help="hard constraint on worker attributes (repeatable)",
    )
    p.add_argument(
        "--prefer",
        type=constraint(soft=True),
        action="append",
        metavar="KEY=VALUE",
        help="soft constraint: preferred, not required (repeatable)",
    )
    p.add_argument(
        "--scheduling-timeout",
        type=duration,
        metavar="DURATION",
        help="give up if not scheduled within this time (e.g. 30m)",
    )
    p.add_argument("--max-retries-preemption", type=non_negative_int, metavar="N")
    p.add_argument("--max-retries-failure", type=non_negative_int, metavar="N")

    p = command(
        jobs,
        "submit",
        cmd_job_submit,
        "submit many jobs (a sweep) from a JSON Lines file, all or nothing per batch",
        epilog="Each line is one job, a JSON object as the body of POST /api/v1/jobs/, e.g. "
        '{"name": "sweep-1", "command": ["python", "train.py", "--lr=0.1"], "replicas": 2}.',
    )
    p.add_argument(
        "-f",
        "--file",
        required=True,
        type=argparse.FileType("r", encoding="utf-8"),
        metavar="FILE",
        help="the jobs, one JSON object per line ('-' reads standard input)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"jobs per request (default {DEFAULT_BATCH_SIZE}; lowered to the server's limit if it has a lower one)",
    )

    p = command(jobs, "list", cmd_job_list, "list jobs")
    p.add_argument("--user", metavar="U")
    p.add_argument("--band", type=band_name, choices=BANDS)
    p.add_argument("--state", metavar="S", help="pending, running, succeeded, failed, killed, ...")
    p.add_argument(
        "--filter",
        type=filter_item,
        action="append",
        metavar="KEY=VALUE",
        help=f"more filters (repeatable): {FILTER_HELP}",
    )
    p.add_argument(
        "--sort",
        metavar="COLUMN",
        help="name, user, band, effective, state, route, tasks, submitted; --sort=-COLUMN for descending",
    )
    p.add_argument(
        "--page", type=positive_int, metavar="N", help="page N (within the first 10,000 jobs; deeper: --cursor)"
    )
    p.add_argument("--cursor", metavar="C", help="the page a previous listing's 'next: --cursor C' points to")
    p.add_argument("--all", action="store_true", help="every matching job (follows the pages)")
    for name, handler, help in [
        ("show", cmd_job_show, "a job with its tasks and attempts"),
        ("explain", cmd_job_explain, "why a job runs where it runs, or why it waits"),
    ]:
        command(jobs, name, handler, help).add_argument("job", metavar="JOB", help="job id, e.g. /alice/train")
    p = command(
        jobs,
        "watch",
        cmd_job_watch,
        "print a job's events (or a user's) as they happen, one line each; a job's watch ends with it",
    )
    p.add_argument("job", nargs="?", metavar="JOB", help="job id, e.g. /alice/train (from its first event)")
    p.add_argument("--user", metavar="U", help="every event of U's jobs and budget instead (from now)")
    p.add_argument("--kind", action="append", metavar="KIND", help="only events of this kind (repeatable)")
    p.add_argument("--since", type=non_negative_int, metavar="ID", help="start after event ID")
    p = command(
        jobs,
        "wait",
        cmd_job_wait,
        "wait until a job ends; exit 0 succeeded, 3 failed, 4 killed, 5 lost, 6 cancelled, 7 preempted, "
        "8 unschedulable, 124 timed out",
    )
    p.add_argument("job", metavar="JOB", help="job id, e.g. /alice/train")
    p.add_argument("--timeout", type=duration, metavar="DURATION", help="give up after this long (e.g. 30m)")
    p = command(jobs, "cancel", cmd_job_cancel, "cancel jobs and their children: ids, or every job a filter matches")
    p.add_argument("jobs", nargs="*", metavar="JOB", help="job id(s), e.g. /alice/train")
    p.add_argument(
        "--filter",
        type=filter_item,
        action="append",
        metavar="KEY=VALUE",
        help=f"cancel every unfinished job matching all of these (repeatable): {FILTER_HELP}",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (needed when not in a terminal)")

    p = command(sub, "queue", cmd_queue, "pending tasks per effective band, in scheduling order")
    p.add_argument("--band", type=band_name, choices=BANDS)
    p.add_argument("--user", metavar="U")
    p.add_argument("--job", metavar="JOB")
    p.add_argument("--page", type=positive_int, metavar="N")

    budgets = group("budget", "read budgets")
    command(budgets, "show", cmd_budget_show, "a user's effective budget and spend (default: yours)").add_argument(
        "user", nargs="?", metavar="USER"
    )
    command(budgets, "list", cmd_budget_list, "every user with a budget row, an open uplift or spend")

    uplifts = group("uplift", "ask for a temporary raise of your max band or budget")
    p = command(uplifts, "request", cmd_uplift_request, "request an uplift (an admin approves it)")
    p.add_argument("--max-band", type=band_name, choices=BANDS, help="the band you need to submit at")
    p.add_argument(
        "--budget-limit", type=budget_points, metavar="N", help="the limit you need, in points (0 = unlimited)"
    )
    p.add_argument("--reason", required=True, metavar="R")
    p.add_argument("--duration", required=True, type=duration, metavar="DURATION", help="e.g. 2h, 1d")
    p.add_argument("--user", metavar="U", help="request for another user (admins)")
    p = command(uplifts, "list", cmd_uplift_list, "uplift requests and grants")
    p.add_argument("--user", metavar="U")
    p.add_argument("--state", choices=UPLIFT_STATES)
    p.add_argument("--page", type=positive_int, metavar="N")

    admin = group("admin", "admin verbs: budgets, uplift decisions, the audit log")
    admin_budget = group("budget", "set budgets", parent=admin)
    p = command(
        admin_budget, "set", cmd_admin_budget_set, "set a user's budget row (a value left out keeps its current value)"
    )
    p.add_argument("user", metavar="USER")
    p.add_argument("--limit", type=budget_points, metavar="N", help="resource-value points, 0 = unlimited")
    p.add_argument("--max-band", type=band_name, choices=BANDS)
    p.add_argument("--reason", required=True, metavar="R")
    p.add_argument(
        "--new-user",
        action="store_true",
        help="USER is new (no account, budget, grant or job yet): create the budget on purpose",
    )
    admin_uplift = group("uplift", "preview, approve or deny uplift requests", parent=admin)
    p = command(admin_uplift, "preview", cmd_admin_uplift_preview, "what approving a request would do at the next tick")
    p.add_argument("id", metavar="ID")
    p = command(admin_uplift, "approve", cmd_admin_uplift_approve, "approve a request; it starts now")
    p.add_argument("id", metavar="ID")
    p.add_argument("--duration", type=duration, metavar="DURATION", help="override the requested duration")
    p.add_argument("--note", metavar="N")
    p = command(admin_uplift, "deny", cmd_admin_uplift_deny, "deny a request")
    p.add_argument("id", metavar="ID")
    p.add_argument("--note", metavar="N")
    command(admin, "audit", cmd_admin_audit, "who changed which budget or grant, when and why").add_argument(
        "--page", type=positive_int, metavar="N"
    )

    command(sub, "tick", cmd_tick, "run one scheduling tick now (operators)")
    workers = group("worker", "list, drain and undrain workers (operators)")
    p = command(workers, "list", cmd_worker_list, "workers with capacity and health, by name")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--page", type=positive_int, metavar="N")
    shown.add_argument("--all", action="store_true", help="every worker (follows the pages)")
    command(workers, "drain", cmd_worker_drain, "stop placing new tasks on a worker").add_argument(
        "name", metavar="NAME"
    )
    command(workers, "undrain", cmd_worker_undrain, "place new tasks on a drained worker again").add_argument(
        "name", metavar="NAME"
    )
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
            getattr(args, "command_parser", parser).error(
                unrecognized(args, extras)
                if hasattr(args, "command_parser")
                else f"unrecognized arguments: {' '.join(extras)}"
            )
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
    except BrokenPipeError:  # `iris job watch | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    if answer is STREAMED:
        return EXIT_OK
    try:
        print(fmt.as_json(answer) if getattr(args, "json", False) else render(answer))
        sys.stdout.flush()
    except BrokenPipeError:  # `iris ... | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    # `iris job wait` says how the job ended by its exit status.
    return getattr(args, "exit_code", EXIT_OK)


def report(exc: CliError, login_hint: bool) -> None:
    print(f"{exc.code}: {exc.message}", file=sys.stderr)
    fields = exc.details.get("fields") if isinstance(exc.details, dict) else None
    if isinstance(fields, dict) and len(fields) > 1:
        for name, messages in list(fields.items())[1:]:
            print(f"  {name}: {fmt.cell(messages)}", file=sys.stderr)
    if exc.code == "UNAUTHENTICATED" and login_hint and "iris login" not in exc.message:
        print("Run `iris login` to sign in again.", file=sys.stderr)
