"""The Kubernetes/Kueue backend: task attempts run as pods that Kueue admits.

Our tick does not place these tasks. It promotes pending tasks routed here to ASSIGNED at a
capped rate (``scheduler.core.kueue``), on the worker row that stands for the cluster, with the
effective band stamped; the dispatcher then calls :meth:`KubernetesBackend.start`, which creates
one pod per attempt through the official ``kubernetes`` client:

- ``priorityClassName`` and the Kueue label ``kueue.x-k8s.io/priority-class`` name the classes of
  the band stamped on the attempt (so a redrive of the same attempt keeps its band), and
  ``kueue.x-k8s.io/queue-name`` the LocalQueue;
- a gang's pods carry Kueue's pod-group label ``kueue.x-k8s.io/pod-group-name`` (one name per
  promotion of the gang) and the annotation ``kueue.x-k8s.io/pod-group-total-count``;
- a single-task CPU-only job (a coordinator) also gets a PodDisruptionBudget: ``minAvailable: 1``
  for SYSTEM and PRODUCTION, ``maxUnavailable: 1`` for INTERACTIVE and BATCH.

Pods and PDBs are named after the attempt (``iris-<task pk>-<attempt>``), so a repeated start
finds them already there (409) and starts nothing twice. :meth:`stop` deletes both.

Set-up (:meth:`ensure_setup`, create-or-update, idempotent) makes the PriorityClasses and the
matching Kueue WorkloadPriorityClasses exist with the configured values; a PriorityClass's value
and preemption policy are immutable in Kubernetes, so a changed one is deleted and re-created.

Status comes back through :meth:`poll` (list, then watch from the list's resourceVersion; a
relist after 410 Gone), classified by :func:`classify`: running, succeeded, failed with the exit
code; a ``DisruptionTarget`` condition or a Kueue eviction (``TerminationTarget`` with reason
``WorkloadEvicted*``) is PREEMPTED; node loss (``DeletionByPodGC``, ``DeletionByTaintManager``,
``TerminationByKubelet``, or a pod reason such as ``NodeLost``) is WORKER_LOST; a pod deleted
before it finished is PREEMPTED. ``scheduler.provisioning.sync_kubernetes`` drives the polling,
applies the reports, removes finished pods (:meth:`collect`) and records the backend's health;
so this backend does not implement the generic :meth:`Backend.sync`, and the cluster is not
read twice.

API errors never write anything: a timeout, a connection error, a 5xx, 403, 404 or 429 raises
:class:`BackendError` (the dispatcher retries with backoff); 400 and 422 (an invalid manifest)
raise :class:`PermanentBackendError`.
"""

from scheduler.backends.kubernetes.backend import KubernetesBackend
from scheduler.backends.kubernetes.status import classify

__all__ = ["KubernetesBackend", "classify"]
