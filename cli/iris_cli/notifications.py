"""``iris me notifications``: what you are told of, by email and webhook (``GET/PUT
me/notifications/``), and the state of your newest notifications. With no option it shows
them; each option changes one setting and leaves the others as they are."""

from __future__ import annotations

import argparse
from pathlib import Path

from iris_cli.cells import fields, pick, table, when
from iris_cli.client import CliError, Session

DELIVERY_COLUMNS = [
    ("EVENT", lambda d: d.get("event")),
    ("TOPIC", lambda d: d.get("topic")),
    ("JOB", lambda d: d.get("job") or ""),
    ("CHANNEL", lambda d: d.get("channel")),
    ("STATE", lambda d: d.get("state")),
    ("TRIES", lambda d: d.get("tries")),
    ("WHEN", lambda d: when(d.get("sent_at") or d.get("next_try_at") or d.get("created_at"))),
    ("ERROR", lambda d: d.get("last_error") or ""),
]


def events_list(text: str) -> list[str]:
    """``finished,failed`` as a list (``none``: the empty list)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    return [] if names == ["none"] else names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--email",
        type=events_list,
        metavar="EVENTS",
        help="events to be told of by email, comma-separated ('none': no email)",
    )
    p.add_argument(
        "--webhook",
        type=events_list,
        metavar="EVENTS",
        help="events to be told of by webhook, comma-separated ('none')",
    )
    p.add_argument("--webhook-url", metavar="URL", help="where webhook events are POSTed ('' removes the webhook)")
    p.add_argument(
        "--webhook-secret-file",
        metavar="FILE",
        help="a file holding the webhook's signing secret (16 to 200 characters); a file keeps it out of shell history",
    )


def cmd_me_notifications(session: Session, args: argparse.Namespace):
    body: dict = {}
    if args.email is not None:
        body["email_events"] = args.email
    if args.webhook is not None:
        body["webhook_events"] = args.webhook
    if args.webhook_url is not None:
        body["webhook_url"] = args.webhook_url
    if args.webhook_secret_file:
        try:
            body["webhook_secret"] = Path(args.webhook_secret_file).read_text().strip()
        except OSError as exc:
            raise CliError("INVALID_ARGUMENT", f"--webhook-secret-file: cannot read it ({exc.strerror})") from None
    data = session.put("me/notifications/", body) if body else session.get("me/notifications/")
    return data, settings_text


def settings_text(data: dict) -> str:
    top = fields(
        [
            ("user", pick(data, "user")),
            ("email to", pick(data, "email") or "(no address on your account: no email is sent)"),
            ("by email", ", ".join(pick(data, "email_events", default=[])) or "(nothing)"),
            ("by webhook", ", ".join(pick(data, "webhook_events", default=[])) or "(nothing)"),
            ("webhook url", pick(data, "webhook_url") or "(none)"),
            ("secret", "set" if pick(data, "webhook_secret_set") else "not set"),
            ("you may choose", ", ".join(pick(data, "choices", default=[]))),
            ("defaults", "yes: you have not chosen yet" if pick(data, "is_default") else None),
        ]
    )
    deliveries = table(pick(data, "deliveries", default=[]), DELIVERY_COLUMNS, empty="No notifications yet.")
    return f"{top}\n\n{deliveries}"
