"""What the fake APIs share: a JSON request handler, the record of requests received with the
failures injected for the next ones, and a threaded server on 127.0.0.1 with an ephemeral port
for the real clients to talk to."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class Fault:
    method: str
    pattern: re.Pattern
    status: int = 500
    delay: float = 0.0
    times: int = 1


@dataclass
class RecordsRequests:
    """A fake's record of every request, and the failures tests inject (a base of the fakes)."""

    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    traffic_lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, method: str, path_regex: str, status: int = 500, times: int = 1, delay: float = 0.0) -> None:
        """The next ``times`` matching requests fail with ``status`` (0: answered normally) after ``delay`` s."""
        with self.traffic_lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), status, delay, times))

    def calls(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self.traffic_lock:
            return [r for r in self.requests if (method is None or r.method == method) and contains in r.path]

    def clear_requests(self) -> None:
        with self.traffic_lock:
            self.requests.clear()

    def record(self, request: Request) -> Fault | None:
        """Keep ``request``; the injected fault it meets, if any (used up by one)."""
        with self.traffic_lock:
            self.requests.append(request)
            fault = next(
                (f for f in self.faults if f.method == request.method and f.pattern.search(request.path) and f.times),
                None,
            )
            if fault:
                fault.times -= 1
        return fault


class JsonHandler(BaseHTTPRequestHandler):
    """Reads JSON requests for ``self.server.fake`` and answers JSON; subclasses route them."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def receive(self, method: str) -> tuple[Request, Fault | None]:
        """The request, recorded, and its injected fault (whose delay has been waited out)."""
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        request = Request(method, url.path, parse_qs(url.query), json.loads(raw) if raw else None)
        fault = self.server.fake.record(request)  # type: ignore[attr-defined]
        if fault and fault.delay:
            time.sleep(fault.delay)
        return request, fault

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def serve(self, method: str) -> None:
        raise NotImplementedError

    def do_GET(self) -> None:
        self.serve("GET")

    def do_POST(self) -> None:
        self.serve("POST")

    def do_PUT(self) -> None:
        self.serve("PUT")

    def do_PATCH(self) -> None:
        self.serve("PATCH")

    def do_DELETE(self) -> None:
        self.serve("DELETE")


class FakeServer:
    """Runs ``handler`` over ``fake`` (reachable as ``self.server.fake`` in the handler)."""

    def __init__(self, fake: object, handler: type[BaseHTTPRequestHandler]) -> None:
        self.fake = fake
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.fake = fake  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
