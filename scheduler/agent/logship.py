"""Shipping attempt logs to the server in chunks, so a log survives the agent's host.

The agent remembers, per attempt, how many bytes of its log the server has; each heartbeat it
sends what is new (at most ``CHUNKS_PER_BEAT`` chunks per attempt, so a chatty task cannot
hold up the heartbeat), and before an attempt's final report it sends the rest. The server
answers where the next chunk starts (a lost answer is retried safely) and whether it keeps no
more of the log (its per-attempt bound, ``IRIS_TASK_LOG_MAX_BYTES``): then the agent stops.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

from scheduler.agent.client import AgentClient, ApiError
from scheduler.agent.process import log_path

log = logging.getLogger("iris.agent")

# Bytes per chunk: the server's limit per request (scheduler.api.agent.MAX_LOG_CHUNK).
CHUNK_BYTES = 256 * 1024
# Chunks per attempt per heartbeat (1 MiB); the final flush sends until the end or the bound.
CHUNKS_PER_BEAT = 4


class LogShipper:
    def __init__(self, client: AgentClient, name: str, log_dir: Path):
        self.client = client
        self.name = name
        self.log_dir = Path(log_dir)
        self.offsets: dict[tuple[int, int], int] = {}
        self.finished: set[tuple[int, int]] = set()  # cut by the server, or refused: ship no more

    def ship(self, key: tuple[int, int], *, final: bool = False) -> None:
        """Send what is new in ``key``'s log. Raises ServerUnreachable (the caller retries later)."""
        if key in self.finished:
            return
        path = log_path(self.log_dir, *key)
        if not path.is_file():
            return
        sent = 0
        with open(path, "rb") as handle:
            while final or sent < CHUNKS_PER_BEAT:
                offset = self.offsets.get(key, 0)
                handle.seek(offset)
                chunk = handle.read(CHUNK_BYTES)
                if not chunk:
                    return
                try:
                    answer = self.client.post(
                        "logs/",
                        {
                            "name": self.name,
                            "task": key[0],
                            "attempt": key[1],
                            "offset": offset,
                            "data": base64.b64encode(chunk).decode("ascii"),
                        },
                    )
                except ApiError as exc:  # refused (not our attempt, gone): retrying cannot help
                    log.warning("agent %s: log of task %s attempt %s not shipped: %s", self.name, *key, exc)
                    self.finished.add(key)
                    return
                self.offsets[key] = int(answer["size"])
                if answer.get("truncated"):
                    self.finished.add(key)
                    return
                sent += 1

    def forget(self, key: tuple[int, int]) -> None:
        self.offsets.pop(key, None)
        self.finished.discard(key)
