"""Serve a fake API on 127.0.0.1 with an ephemeral port, in a thread, for the real clients."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
