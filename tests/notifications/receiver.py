"""A real webhook receiver for the tests: an HTTP server on a free local port, in a thread, that
checks each request's signature and remembers idempotency keys, as docs/api.md tells receivers to.

``answers`` is the status to give each request in turn (then 204); ``hold`` (a threading.Event)
makes it keep each request's answer until set, so a test can kill the sender mid-delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """The receiver's check, written from docs/api.md rather than imported from the server:
    HMAC-SHA256 keyed by the secret over the timestamp, ".", and the body."""
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return bool(timestamp.isdigit()) and hmac.compare_digest(expected, header)


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # http.server's 5 drops parallel connects (the SYN is retried 1 s later)
    daemon_threads = True


@dataclass
class Received:
    key: str
    user: str
    topic: str
    timestamp: str
    signature: str
    body: bytes
    valid: bool

    @property
    def event(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    secret: str
    answers: list[int] = field(default_factory=list)
    hold: threading.Event | None = None
    received: list[Received] = field(default_factory=list)
    processed: dict[str, dict] = field(default_factory=dict)  # by idempotency key: done once
    got_one: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                got = Received(
                    key=self.headers.get("Idempotency-Key", ""),
                    user=self.headers.get("X-Iris-User", ""),
                    topic=self.headers.get("X-Iris-Topic", ""),
                    timestamp=self.headers.get("X-Iris-Timestamp", ""),
                    signature=self.headers.get("X-Iris-Signature", ""),
                    body=body,
                    valid=verify(
                        receiver.secret,
                        self.headers.get("X-Iris-Timestamp", ""),
                        body,
                        self.headers.get("X-Iris-Signature", ""),
                    ),
                )
                receiver.received.append(got)
                status = receiver.answers.pop(0) if receiver.answers else 204
                if got.valid and 200 <= status < 300:
                    receiver.processed.setdefault(got.key, got.event)
                receiver.got_one.set()
                if receiver.hold is not None:
                    receiver.hold.wait(60)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()
