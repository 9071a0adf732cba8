"""A pod as an attempt's status: what Kubernetes says happened to it, in the backend contract's
terms."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.backends.base import (
    AttemptRef,
    AttemptStatus,
)

log = logging.getLogger(__name__)

from scheduler.backends.kubernetes.manifests import (
    CONTAINER,
    LABEL_ATTEMPT,
    LABEL_TASK,
    NODE_LOSS_DISRUPTIONS,
    NODE_LOSS_REASONS,
)

# --- status ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodStatus:
    status: AttemptStatus | None  # None: waiting for admission (nothing to report yet)
    exit_code: int | None = None
    message: str = ""


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = pod.get("status") or {}
    return {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for item in statuses:
        if item.get("name") == CONTAINER or len(statuses) == 1:
            terminated = (item.get("state") or {}).get("terminated")
            if terminated:
                return terminated
    return None


def classify(pod: Mapping[str, Any], *, deleted: bool = False) -> PodStatus:
    """What a pod (camelCase, as the API serves it) says about its attempt."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    conditions = _conditions(pod)
    kueue = conditions.get("TerminationTarget")
    disruption = conditions.get("DisruptionTarget")
    for condition in (kueue, disruption):
        if condition and str(condition.get("reason", "")).startswith("WorkloadEvicted"):
            return PodStatus(
                AttemptStatus.PREEMPTED,
                None,
                f"evicted by Kueue ({condition.get('reason')}): {condition.get('message', '')}".rstrip(": "),
            )
    if disruption and disruption.get("reason") in NODE_LOSS_DISRUPTIONS:
        return PodStatus(AttemptStatus.WORKER_LOST, None, f"node lost ({disruption.get('reason')})")
    if status.get("reason") in NODE_LOSS_REASONS:
        return PodStatus(
            AttemptStatus.WORKER_LOST,
            None,
            f"node lost ({status.get('reason')}): {status.get('message', '')}".rstrip(": "),
        )
    if disruption:
        return PodStatus(AttemptStatus.PREEMPTED, None, f"preempted ({disruption.get('reason')})")
    terminated = _terminated(pod)
    if phase == "Succeeded":
        return PodStatus(AttemptStatus.SUCCEEDED, 0)
    if phase == "Failed":
        code = terminated.get("exitCode") if terminated else None
        reason = (terminated or {}).get("reason") or status.get("reason") or "Error"
        text = f"exited with code {code} ({reason})" if code is not None else f"pod failed ({reason})"
        return PodStatus(AttemptStatus.FAILED, code, text)
    if deleted:
        return PodStatus(AttemptStatus.PREEMPTED, None, "pod deleted before it finished")
    if phase == "Running":
        return PodStatus(AttemptStatus.RUNNING)
    if "PodScheduled" in conditions:
        return PodStatus(AttemptStatus.BUILDING)
    return PodStatus(None)


def attempt_of(pod: Mapping[str, Any]) -> AttemptRef | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return AttemptRef(int(labels[LABEL_TASK]), int(labels[LABEL_ATTEMPT]))
    except (KeyError, ValueError):
        return None
