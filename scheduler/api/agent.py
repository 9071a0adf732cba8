"""The worker agents' API (``/api/v1/agent/``): register, heartbeat (answered with the agent's
start and stop orders), report; and task logs for people.

Each agent authenticates with its worker's own credential (``Authorization: Worker <key>``,
minted by an operator: ``scheduler/execution/enrolment.py``) and acts only as that worker: a
call that names another worker, or a report about an attempt placed on another worker, is
refused (403) and logged. People's API tokens and sessions cannot call these endpoints, and a
worker credential authenticates nothing else.

The views are thin: they validate the wire format and call ``scheduler.execution``
(``workers`` to register and heartbeat, ``attempts`` for reports). Wire shapes:

- ``POST register/``  ``{"name", "cpu", "memory", "device"?, "attributes"?, "backend"?}``
  -> ``{"worker", "created", "heartbeat_seconds"}``
- ``POST heartbeat/`` ``{"name", "running": [{"task", "attempt"}], "healthy"?}``
  -> ``{"worker", "heartbeat_seconds", "starts": [start order], "stops": [stop order]}``
  where a start order is ``{"task", "attempt", "uid", "name", "job", "user", "band", "memory", "command", "env"}``
  (``user``: the job's Iris user; ``memory``: its request in bytes, which the agent enforces)
  and a stop order ``{"task", "attempt", "reason", "grace_seconds"}``.
- ``POST report/``    ``{"name", "reports": [{"task", "attempt", "status", "exit_code"?, "message"?}]}``
  with ``status`` one of building, running, succeeded, failed, preempted, worker_lost
  -> ``{"applied", "ignored"}`` (reports about attempts that do not exist are ignored)
- ``POST logs/``      ``{"name", "task", "attempt", "offset", "data"}`` (``data`` base64, at most
  256 KiB): a chunk of an attempt's log, only for attempts placed on the caller's worker
  -> ``{"size", "truncated"}`` (where the next chunk starts; ``truncated``: stop, the server
  keeps no more, see ``scheduler.execution.logs``)
- ``GET logs/<task pk>/<attempt>/?tail=<bytes>``: the attempt's log as text, for the job's
  owner, operators and admins: the file agents on this host write under ``IRIS_DATA_DIR/logs``,
  else the copy remote agents shipped (``X-Log-Source`` says which).
"""

from __future__ import annotations

import base64
import binascii
import logging

from django.conf import settings
from django.db.models import Q
from django.http import HttpResponse
from django.urls import path
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from scheduler.api.authentication import ApiTokenAuthentication
from rest_framework import exceptions, serializers
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus, StartOrder, StopOrder
from scheduler.foundation.errors import InvalidArgument, NotFound, PermissionDenied
from scheduler.execution.attempts import apply_reports
from scheduler.execution.enrolment import worker_for_credential
from scheduler.execution.logs import may_read_log, read_tail, store_chunk
from scheduler.execution.workers import agent_heartbeat, register_agent
from scheduler.foundation.inputs import parse_int, parse_worker_name
from scheduler.models import Attempt, Task

log = logging.getLogger(__name__)

# The Authorization scheme of worker credentials (people's API tokens use "Token").
WORKER_SCHEME = "Worker"
# Bytes of a log returned when no ``tail`` is given, and at most.
DEFAULT_LOG_TAIL = 256 * 1024
MAX_LOG_TAIL = 8 * 1024 * 1024
# Bytes of log one shipped chunk may carry (agents send at most this per request).
MAX_LOG_CHUNK = 256 * 1024
MAX_REPORTS = 1000
MAX_RUNNING = 10_000


class WorkerAgent:
    """Who calls the agent API: the agent of one worker. Not a user: it has no role, no budget
    and no groups, so every check of :mod:`scheduler.foundation.roles` says no."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, worker_name: str):
        self.worker_name = worker_name
        self.username = f"worker:{worker_name}"
        self._iris_groups: set[str] = set()  # what roles.is_admin / is_operator read

    def __str__(self) -> str:
        return self.username


class WorkerCredentialAuthentication(BaseAuthentication):
    """``Authorization: Worker <credential>``: the caller is the agent of the credential's worker."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != WORKER_SCHEME.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("expected 'Authorization: Worker <credential>'")
        try:
            credential = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("invalid worker credential") from None
        worker_name = worker_for_credential(credential)
        if worker_name is None:
            raise exceptions.AuthenticationFailed(
                "invalid or revoked worker credential: an operator mints one with manage.py worker_credential"
            )
        agent = WorkerAgent(worker_name)
        return agent, agent

    def authenticate_header(self, request) -> str:
        return WORKER_SCHEME


class WorkerCredentialScheme(OpenApiAuthenticationExtension):
    target_class = WorkerCredentialAuthentication
    name = "workerCredential"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Worker <credential> (manage.py worker_credential NAME)",
        }


class IsWorkerAgent(BasePermission):
    message = (
        "the agent API takes a worker's own credential ('Authorization: Worker <credential>', minted by "
        "an operator with manage.py worker_credential); user tokens cannot act as workers"
    )

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, WorkerAgent)


class AgentView(APIView):
    # People's tokens authenticate too, so that a person calling here is told why it is refused
    # (403), not asked to sign in (401).
    authentication_classes = [WorkerCredentialAuthentication, ApiTokenAuthentication]
    permission_classes = [IsWorkerAgent]

    def own_worker(self, name) -> str:
        """``name``, if it is the caller's worker; otherwise the call is refused and logged."""
        worker_name = parse_worker_name(name)
        caller = self.request.user.worker_name
        if worker_name != caller:
            log.warning(
                "the agent of worker %s tried to act as worker %s",
                caller,
                worker_name,
                extra={"worker": caller, "action": "agent.impersonation", "named": worker_name},
            )
            raise PermissionDenied(
                f"this credential belongs to worker {caller}; it cannot act as worker {worker_name}", field="name"
            )
        return worker_name


def attempts_placed_elsewhere(worker_name: str, refs: list[AttemptRef]) -> list[AttemptRef]:
    """Those of ``refs`` that exist but were not placed on ``worker_name``."""
    if not refs:
        return []
    wanted = Q()
    for ref in set(refs):
        wanted |= Q(task_id=ref.task_pk, number=ref.attempt)
    rows = Attempt.objects.filter(wanted).values_list("task_id", "number", "worker__name")
    return [AttemptRef(task, number) for task, number, placed_on in rows if placed_on != worker_name]


# --- wire formats ---------------------------------------------------------------------------------


class AgentAttemptKeySerializer(serializers.Serializer):
    task = serializers.IntegerField(min_value=1)
    attempt = serializers.IntegerField(min_value=1)


class AgentRegisterSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=255)
    # Validated by the service parsers, which accept "4" and 4, "8Gi" and bytes.
    cpu = serializers.JSONField()
    memory = serializers.JSONField()
    device = serializers.JSONField(required=False, allow_null=True)
    attributes = serializers.JSONField(required=False, allow_null=True)
    backend = serializers.CharField(max_length=32, required=False, default="local")


class AgentHeartbeatSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=255)
    running = AgentAttemptKeySerializer(many=True, required=False, default=list, max_length=MAX_RUNNING)
    healthy = serializers.BooleanField(required=False, default=True)


class AgentReportItemSerializer(AgentAttemptKeySerializer):
    status = serializers.ChoiceField(choices=[s.value for s in AttemptStatus])
    exit_code = serializers.IntegerField(required=False, allow_null=True, min_value=-(2**31), max_value=2**31 - 1)
    message = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class AgentReportSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=255)
    reports = AgentReportItemSerializer(many=True, max_length=MAX_REPORTS)


class AgentRegisterAnswerSerializer(serializers.Serializer):
    worker = serializers.CharField()
    created = serializers.BooleanField()
    heartbeat_seconds = serializers.FloatField()


class AgentStartOrderSerializer(AgentAttemptKeySerializer):
    uid = serializers.CharField()
    name = serializers.CharField()
    job = serializers.CharField()
    user = serializers.CharField()
    band = serializers.CharField()
    memory = serializers.IntegerField()
    command = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField())


class AgentStopOrderSerializer(AgentAttemptKeySerializer):
    reason = serializers.CharField()
    grace_seconds = serializers.FloatField()


class AgentHeartbeatAnswerSerializer(serializers.Serializer):
    worker = serializers.CharField()
    heartbeat_seconds = serializers.FloatField()
    starts = AgentStartOrderSerializer(many=True)
    stops = AgentStopOrderSerializer(many=True)


class AgentReportAnswerSerializer(serializers.Serializer):
    applied = serializers.IntegerField()
    ignored = serializers.IntegerField()


def start_to_wire(order: StartOrder) -> dict:
    return {
        "task": order.ref.task_pk,
        "attempt": order.ref.attempt,
        "uid": order.ref.uid,
        "name": order.task,
        "job": order.job,
        "user": order.user,
        "band": order.band.wire,
        "memory": order.resources.memory_bytes,
        "command": list(order.command),
        "env": dict(order.environment),
    }


def stop_to_wire(order: StopOrder) -> dict:
    return {
        "task": order.ref.task_pk,
        "attempt": order.ref.attempt,
        "reason": order.reason,
        "grace_seconds": order.grace_seconds,
    }


def valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- views ----------------------------------------------------------------------------------------


class RegisterView(AgentView):
    @extend_schema(
        request=AgentRegisterSerializer,
        responses={200: AgentRegisterAnswerSerializer, 201: AgentRegisterAnswerSerializer},
    )
    def post(self, request):
        data = valid(AgentRegisterSerializer, request.data)
        worker, created = register_agent(
            name=self.own_worker(data["name"]),
            cpu=data["cpu"],
            memory=data["memory"],
            device=data.get("device"),
            attributes=data.get("attributes"),
            backend=data["backend"],
        )
        return Response(
            {"worker": worker.name, "created": created, "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS},
            status=201 if created else 200,
        )


class HeartbeatView(AgentView):
    @extend_schema(request=AgentHeartbeatSerializer, responses=AgentHeartbeatAnswerSerializer)
    def post(self, request):
        data = valid(AgentHeartbeatSerializer, request.data)
        name = self.own_worker(data["name"])
        running = [AttemptRef(item["task"], item["attempt"]) for item in data["running"]]
        box = agent_heartbeat(name, running, healthy=data["healthy"])
        return Response(
            {
                "worker": name,
                "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS,
                "starts": [start_to_wire(o) for o in box.starts],
                "stops": [stop_to_wire(o) for o in box.stops],
            }
        )


class ReportView(AgentView):
    @extend_schema(request=AgentReportSerializer, responses=AgentReportAnswerSerializer)
    def post(self, request):
        data = valid(AgentReportSerializer, request.data)
        name = self.own_worker(data["name"])
        refs = [AttemptRef(item["task"], item["attempt"]) for item in data["reports"]]
        elsewhere = attempts_placed_elsewhere(name, refs)
        if elsewhere:
            listed = ", ".join(f"task {ref.task_pk} attempt {ref.attempt}" for ref in elsewhere[:10])
            log.warning(
                "the agent of worker %s reported on attempts not placed on it: %s",
                name,
                listed,
                extra={"worker": name, "action": "agent.foreign_report", "attempts": len(elsewhere)},
            )
            raise PermissionDenied(f"worker {name} may report only on attempts placed on it, not on {listed}")
        outcome = apply_reports(
            AttemptReport(
                ref=AttemptRef(item["task"], item["attempt"]),
                status=AttemptStatus(item["status"]),
                exit_code=item.get("exit_code"),
                message=item.get("message", ""),
                worker=name,
            )
            for item in data["reports"]
        )
        return Response({"applied": outcome.applied, "ignored": outcome.ignored})


class AgentLogChunkSerializer(AgentAttemptKeySerializer):
    name = serializers.CharField(max_length=255)
    offset = serializers.IntegerField(min_value=0, help_text="where the chunk starts in the agent's log, in bytes")
    data = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,
        max_length=4 * MAX_LOG_CHUNK // 3 + 4,
        help_text=f"the chunk's bytes, base64 (at most {MAX_LOG_CHUNK:,} bytes)",
    )


class AgentLogChunkAnswerSerializer(serializers.Serializer):
    size = serializers.IntegerField(help_text="bytes of the log the server has: where the next chunk starts")
    truncated = serializers.BooleanField(help_text="the server keeps no more of this log (IRIS_TASK_LOG_MAX_BYTES)")


class LogChunkView(AgentView):
    """An agent ships a chunk of an attempt's log; only for attempts placed on its own worker."""

    @extend_schema(request=AgentLogChunkSerializer, responses=AgentLogChunkAnswerSerializer)
    def post(self, request):
        data = valid(AgentLogChunkSerializer, request.data)
        name = self.own_worker(data["name"])
        ref = AttemptRef(data["task"], data["attempt"])
        placed_on = Attempt.objects.filter(task_id=ref.task_pk, number=ref.attempt).values_list(
            "worker__name", flat=True
        )
        if not placed_on:
            raise NotFound(f"task {ref.task_pk} has no attempt {ref.attempt}", field="attempt")
        if placed_on[0] != name:
            log.warning(
                "the agent of worker %s shipped a log of task %s attempt %s, not placed on it",
                name,
                ref.task_pk,
                ref.attempt,
                extra={"worker": name, "action": "agent.foreign_log", "attempts": 1},
            )
            raise PermissionDenied(f"worker {name} may ship logs only of attempts placed on it")
        try:
            chunk = base64.b64decode(data["data"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("must be base64", field="data") from None
        if len(chunk) > MAX_LOG_CHUNK:
            raise InvalidArgument(f"at most {MAX_LOG_CHUNK:,} bytes per chunk", field="data")
        outcome = store_chunk(ref.task_pk, ref.attempt, data["offset"], chunk)
        return Response({"size": outcome.size, "truncated": outcome.truncated})


class AttemptLogView(APIView):
    """An attempt's log, for the job's owner, operators and admins."""

    permission_classes = [IsAuthenticated]
    # A worker credential is recognised here only to be refused (403): logs are for people.
    authentication_classes = [WorkerCredentialAuthentication, *APIView.authentication_classes]

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description="bytes from the end (default 256 KiB)")],
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="the attempt's log")},
    )
    def get(self, request, task_pk: int, attempt: int):
        task = Task.objects.select_related("job").filter(pk=task_pk).first()
        if task is None:
            raise NotFound(f"task {task_pk} does not exist")
        if not may_read_log(request.user, task.job):
            raise PermissionDenied(f"logs of {task.job.name} are for its owner '{task.job.user}', operators and admins")
        row = Attempt.objects.filter(task=task, number=attempt).select_related("worker").first()
        if row is None:
            raise NotFound(f"task {task.job.name}/{task.index} has no attempt {attempt}")
        tail = parse_int(
            request.query_params.get("tail"), "tail", minimum=1, maximum=MAX_LOG_TAIL, default=DEFAULT_LOG_TAIL
        )
        found = read_tail(task_pk, attempt, tail)
        if found is None:
            where = f"on worker {row.worker.name}" if row.worker else "on its worker"
            raise NotFound(
                f"no log for attempt {attempt} of {task.job.name}/{task.index} on this server yet; it is written "
                f"{where} under its IRIS_DATA_DIR/logs/{task_pk}/{attempt}.log and shipped here as it grows"
            )
        response = HttpResponse(found.text, content_type="text/plain; charset=utf-8")
        response["X-Log-Size"] = str(found.size)
        response["X-Log-Source"] = found.source
        return response


app_name = "agent"

urlpatterns = [
    path("register/", RegisterView.as_view(), name="register"),
    path("heartbeat/", HeartbeatView.as_view(), name="heartbeat"),
    path("report/", ReportView.as_view(), name="report"),
    path("logs/", LogChunkView.as_view(), name="log-chunk"),
    path("logs/<int:task_pk>/<int:attempt>/", AttemptLogView.as_view(), name="log"),
]
