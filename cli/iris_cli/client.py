"""The one HTTP helper of the CLI, and where its credentials live.

Credentials are ``{"server", "token", "username"}`` in ``~/.config/iris/credentials.json``
(mode 0600). ``IRIS_SERVER`` and ``IRIS_TOKEN`` override what the file says, so scripts and CI
need no file at all. Every failure becomes a :class:`CliError` carrying the server's error code
and message; the caller prints it and exits 1.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

API_PREFIX = "/api/v1/"
# Where `make run` serves by default; IRIS_HOST/IRIS_PORT (make run's own variables) move it.
DEFAULT_SERVER = (
    f"http://{os.environ.get('IRIS_HOST', '').strip() or '127.0.0.1'}"
    f":{os.environ.get('IRIS_PORT', '').strip() or '8000'}"
)
# Seconds to wait for the server; a tick run on demand is the slowest request.
TIMEOUT_SECONDS = 60
USER_AGENT = "iris-cli/1"
# Job ids keep their slashes and verbs their colon; everything a URL path cannot carry is
# percent-encoded (spaces, ?, #, %, non-ASCII).
PATH_SAFE = "/:@!$&'()*+,;=-._~"


class CliError(Exception):
    """An error to show as ``code: message`` and exit 1."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None, status: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}
        self.status = status


# --- credentials ----------------------------------------------------------------------------------


def credentials_path() -> Path:
    return Path.home() / ".config" / "iris" / "credentials.json"


def read_credentials() -> dict[str, str]:
    path = credentials_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError("CREDENTIALS", f"cannot read {path}: {exc}; run `iris login` again") from None
    return data if isinstance(data, dict) else {}


def write_credentials(server: str, token: str, username: str) -> Path:
    """Write the credentials file readable by its owner only (the token is a password)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have had wider permissions
    with os.fdopen(fd, "w") as fh:
        json.dump({"server": server, "token": token, "username": username}, fh, indent=2)
        fh.write("\n")
    return path


def normalize_server(server: str) -> str:
    server = server.strip().rstrip("/")
    if server and "://" not in server:
        server = f"http://{server}"
    return server


@dataclass
class Session:
    """Where to send requests and with which token (``None`` before login)."""

    server: str
    token: str | None = None
    username: str | None = None
    # Headers sent with every request, besides the token.
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, server: str | None = None) -> Session:
        """``--server``, then ``IRIS_SERVER``/``IRIS_TOKEN``, then the credentials file."""
        stored = read_credentials()
        chosen = server or os.environ.get("IRIS_SERVER") or stored.get("server") or ""
        token = os.environ.get("IRIS_TOKEN") or None
        username = None
        if token is None and normalize_server(chosen) == normalize_server(stored.get("server") or ""):
            token, username = stored.get("token"), stored.get("username")
        return cls(server=normalize_server(chosen), token=token, username=username)

    def require_login(self) -> None:
        if not self.server or not self.token:
            raise CliError(
                "UNAUTHENTICATED",
                "not logged in: run `iris login` (or set IRIS_SERVER and IRIS_TOKEN)",
            )

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        url = self.server + API_PREFIX + quote(path.lstrip("/"), safe=PATH_SAFE)
        params = {k: v for k, v in (query or {}).items() if v is not None and v != ""}
        return f"{url}?{urlencode(params)}" if params else url

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        auth: bool = True,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty), or raise CliError."""
        if auth:
            self.require_login()
        elif not self.server:
            raise CliError("INVALID_ARGUMENT", "no server: give --server or set IRIS_SERVER")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self.headers}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Token {self.token}"
        url = self.url(path, query)
        request = Request(url, data=data, method=method, headers=headers)
        with self._answering(url):
            with urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                return decode(response.read())

    def stream(self, path: str, last_event_id: str | None = None, **query: Any) -> Iterator[dict[str, str]]:
        """``GET path`` as server-sent events: each frame's fields (``id``, ``data``, ...; comments
        left out) as it arrives, until the server ends the stream. ``last_event_id``: the
        ``Last-Event-ID`` header, to resume."""
        self.require_login()
        headers = {"Accept": "text/event-stream", "User-Agent": USER_AGENT, **self.headers}
        headers["Authorization"] = f"Token {self.token}"
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        url = self.url(path, query)
        with self._answering(url):
            with urlopen(Request(url, headers=headers), timeout=TIMEOUT_SECONDS) as response:
                frame: dict[str, str] = {}
                for raw in response:
                    line = raw.decode().rstrip("\r\n")
                    if not line:
                        if frame:
                            yield frame
                        frame = {}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(":")
                        frame[name] = value.removeprefix(" ")

    @contextmanager
    def _answering(self, url: str) -> Iterator[None]:
        """Every failure to get an answer from ``url`` as a :class:`CliError`."""
        try:
            yield
        except HTTPError as exc:
            raise error_from_response(exc.code, exc.reason, exc.read(), url) from None
        except URLError as exc:
            reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
            raise unreachable(self.server, str(reason)) from None
        except (TimeoutError, socket.timeout):
            raise unreachable(self.server, f"no answer within {TIMEOUT_SECONDS} s") from None
        except (ConnectionError, OSError) as exc:
            raise unreachable(self.server, exc.strerror or str(exc)) from None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body if body is not None else {})

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)


def decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    return json.loads(raw)


def unreachable(server: str, reason: str) -> CliError:
    return CliError(
        "UNAVAILABLE",
        f"cannot reach the Iris server at {server} ({reason}). Is it running? "
        "Check the address (IRIS_SERVER, or `iris login --server URL`).",
    )


def error_from_response(status: int, reason: str, raw: bytes, url: str) -> CliError:
    """The server's ``{"code", "message", "details"}``; anything else (a proxy's HTML page) as HTTP."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if isinstance(body, dict) and "code" in body and "message" in body:
        details = body.get("details") if isinstance(body.get("details"), dict) else {}
        return CliError(str(body["code"]), str(body["message"]), details, status)
    return CliError("HTTP_ERROR", f"HTTP {status} {reason} from {url} (not an Iris API answer)", status=status)
