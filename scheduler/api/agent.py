"""The worker agents' API (``/api/v1/agent/``): register, heartbeat (answered with the agent's
start and stop orders), report; and task logs for people.

Agents authenticate with a DRF token of a user who is an operator or in the ``iris-agents``
group (``seed_demo`` creates one for the local demo cluster). An agent speaks only for the
worker it names: reports about attempts placed elsewhere are ignored.

The views are thin: they validate the wire format and call ``scheduler.execution``
(``workers`` to register and heartbeat, ``attempts`` for reports). Wire shapes:

- ``POST register/``  ``{"name", "cpu", "memory", "device"?, "attributes"?, "backend"?}``
  -> ``{"worker", "created", "heartbeat_seconds"}``
- ``POST heartbeat/`` ``{"name", "running": [{"task", "attempt"}], "healthy"?}``
  -> ``{"worker", "heartbeat_seconds", "starts": [start order], "stops": [stop order]}``
  where a start order is ``{"task", "attempt", "uid", "name", "job", "band", "command", "env"}``
  and a stop order ``{"task", "attempt", "reason", "grace_seconds"}``.
- ``POST report/``    ``{"name", "reports": [{"task", "attempt", "status", "exit_code"?, "message"?}]}``
  with ``status`` one of building, running, succeeded, failed, preempted, worker_lost
  -> ``{"applied", "ignored"}``
- ``GET logs/<task pk>/<attempt>/?tail=<bytes>``: the attempt's log as text, for the job's
  owner, operators and admins (logs are read from this server's ``IRIS_DATA_DIR/logs``, where
  agents on the same host write them).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler import roles
from scheduler.access import owns_job
from scheduler.agent.process import log_path
from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus, StartOrder, StopOrder
from scheduler.errors import NotFound, PermissionDenied
from scheduler.execution.attempts import apply_reports
from scheduler.execution.workers import agent_heartbeat, register_agent
from scheduler.inputs import parse_int, parse_worker_name
from scheduler.models import Attempt, Task

AGENT_GROUP = "iris-agents"
# Bytes of a log returned when no ``tail`` is given, and at most.
DEFAULT_LOG_TAIL = 256 * 1024
MAX_LOG_TAIL = 8 * 1024 * 1024
MAX_REPORTS = 1000
MAX_RUNNING = 10_000


def is_agent(user) -> bool:
    """Operators and members of ``iris-agents`` may act as worker agents."""
    if not (user and user.is_authenticated):
        return False
    return roles.is_operator(user) or user.groups.filter(name=AGENT_GROUP).exists()


class IsAgent(BasePermission):
    message = f"only worker agents (operators or members of '{AGENT_GROUP}') may call the agent API"

    def has_permission(self, request, view) -> bool:
        return is_agent(request.user)


class AgentView(APIView):
    permission_classes = [IsAgent]


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
    band = serializers.CharField()
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
        "band": order.band.wire,
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
    @extend_schema(request=AgentRegisterSerializer, responses={200: AgentRegisterAnswerSerializer, 201: AgentRegisterAnswerSerializer})
    def post(self, request):
        data = valid(AgentRegisterSerializer, request.data)
        worker, created = register_agent(
            name=data["name"], cpu=data["cpu"], memory=data["memory"], device=data.get("device"),
            attributes=data.get("attributes"), backend=data["backend"],
        )
        return Response(
            {"worker": worker.name, "created": created, "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS},
            status=201 if created else 200,
        )


class HeartbeatView(AgentView):
    @extend_schema(request=AgentHeartbeatSerializer, responses=AgentHeartbeatAnswerSerializer)
    def post(self, request):
        data = valid(AgentHeartbeatSerializer, request.data)
        name = parse_worker_name(data["name"])
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
        name = parse_worker_name(data["name"])
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


class AttemptLogView(APIView):
    """An attempt's log, for the job's owner, operators and admins."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description="bytes from the end (default 256 KiB)")],
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="the attempt's log")},
    )
    def get(self, request, task_pk: int, attempt: int):
        task = Task.objects.select_related("job").filter(pk=task_pk).first()
        if task is None:
            raise NotFound(f"task {task_pk} does not exist")
        user = request.user
        if not (owns_job(user, task.job) or roles.is_operator(user)):
            raise PermissionDenied(
                f"logs of {task.job.name} are for its owner '{task.job.user}', operators and admins"
            )
        row = Attempt.objects.filter(task=task, number=attempt).select_related("worker").first()
        if row is None:
            raise NotFound(f"task {task.job.name}/{task.index} has no attempt {attempt}")
        tail = parse_int(
            request.query_params.get("tail"), "tail", minimum=1, maximum=MAX_LOG_TAIL, default=DEFAULT_LOG_TAIL
        )
        file = log_path(settings.TASK_LOG_DIR, task_pk, attempt)
        if not file.is_file():
            where = f"on worker {row.worker.name}" if row.worker else "on its worker"
            raise NotFound(
                f"no log for attempt {attempt} of {task.job.name}/{task.index} on this server; "
                f"it is written {where} under its IRIS_DATA_DIR/logs/{task_pk}/{attempt}.log"
            )
        with open(file, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - tail))
            body = handle.read()
        response = HttpResponse(body.decode("utf-8", errors="replace"), content_type="text/plain; charset=utf-8")
        response["X-Log-Size"] = str(size)
        return response


app_name = "agent"

urlpatterns = [
    path("register/", RegisterView.as_view(), name="register"),
    path("heartbeat/", HeartbeatView.as_view(), name="heartbeat"),
    path("report/", ReportView.as_view(), name="report"),
    path("logs/<int:task_pk>/<int:attempt>/", AttemptLogView.as_view(), name="log"),
]
