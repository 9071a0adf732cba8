"""The agent's HTTP client for ``/api/v1/agent/`` (standard library only). It sends its
worker's credential as ``Authorization: Worker <credential>`` (docs/operations.md, "Worker agents")."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

# Seconds one request may take before the agent gives up on it and tries again later.
REQUEST_TIMEOUT = 10.0


class ServerUnreachable(Exception):
    """The server did not answer (down, restarting, network). The agent keeps going and retries."""


class ApiError(Exception):
    """The server answered with an error."""

    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")


class AgentClient:
    def __init__(self, server: str, credential: str, *, timeout: float = REQUEST_TIMEOUT):
        self.base = server.rstrip("/") + "/api/v1/agent/"
        self.credential = credential
        self.timeout = timeout

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Worker {self.credential}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", errors="replace")[:500]
            if exc.code >= 500:
                raise ServerUnreachable(f"HTTP {exc.code} from {self.base}{path}") from None
            raise ApiError(exc.code, body) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise ServerUnreachable(f"{self.base}{path}: {getattr(exc, 'reason', exc)}") from None

    def register(self, capacity: dict[str, Any]) -> Any:
        return self.post("register/", capacity)

    def heartbeat(self, name: str, running: list[dict[str, int]], *, healthy: bool = True) -> Any:
        return self.post("heartbeat/", {"name": name, "running": running, "healthy": healthy})

    def report(self, name: str, reports: list[dict[str, Any]]) -> Any:
        return self.post("report/", {"name": name, "reports": reports})
