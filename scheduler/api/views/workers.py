"""Workers: register, heartbeat, credentials, drain and undrain."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from scheduler.api import serializers as s
from scheduler.api.permissions import IsOperator, ReadAnyWriteOperator
from scheduler.foundation.errors import InvalidArgument
from scheduler.execution.enrolment import mint_worker_credential
from scheduler.execution.queries import with_active_tasks, workers_by_name, workers_with_load
from scheduler.execution.workers import drain_worker, heartbeat_worker, register_worker, undrain_worker

from scheduler.api.views.base import IrisView, PAGE_PARAMETERS, Pagination, paginated, path_parameter


# --- workers --------------------------------------------------------------------------------------


WORKER = path_parameter("name", "the worker's name")


class WorkersView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403")

    @extend_schema(
        operation_id="workers_list",
        summary="Workers by name with capacity and active task counts",
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(s.WorkerSerializer, "PaginatedWorkerList")},
        tags=["workers"],
    )
    def get(self, request):
        paginator = Pagination()
        page = with_active_tasks(paginator.paginate_queryset(workers_by_name(), request, view=self))
        return paginator.get_paginated_response(s.WorkerSerializer(page, many=True).data)

    @extend_schema(
        operation_id="workers_register",
        summary="Register or update a worker by name (operators); 201 when new",
        request=s.WorkerRegisterSerializer,
        responses={200: s.WorkerSerializer, 201: s.WorkerSerializer},
        tags=["workers"],
    )
    def post(self, request):
        data = self.body()
        unknown = sorted(set(data) - {"name", "cpu", "memory", "device", "attributes", "backend"})
        if unknown:
            raise InvalidArgument(
                "unknown field; known fields are name, cpu, memory, device, attributes, backend", field=unknown[0]
            )
        worker, created = register_worker(
            request.user,
            name=data.get("name"),
            cpu=data.get("cpu"),
            memory=data.get("memory"),
            device=data.get("device"),
            attributes=data.get("attributes"),
            backend=data.get("backend") or "local",
        )
        worker = workers_with_load().get(pk=worker.pk)
        return Response(
            s.WorkerSerializer(worker).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class WorkerHeartbeatView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="workers_heartbeat",
        summary="Record a worker's heartbeat (operators)",
        parameters=[WORKER],
        request=s.HeartbeatSerializer,
        responses={200: s.WorkerSerializer},
        tags=["workers"],
    )
    def post(self, request, name: str):
        data = self.body()
        worker = heartbeat_worker(request.user, name, healthy=data.get("healthy", True))
        return Response(s.WorkerSerializer(worker).data)


class WorkerCredentialView(IrisView):
    permission_classes = [IsOperator]
    error_statuses = ("400", "401", "403")

    @extend_schema(
        operation_id="workers_credential",
        summary="Mint a worker agent's credential, replacing the worker's earlier one (operators)",
        parameters=[WORKER],
        request=None,
        responses={201: s.WorkerCredentialSerializer},
        tags=["workers"],
    )
    def post(self, request, name: str):
        credential = mint_worker_credential(request.user, name)
        return Response({"worker": name, "credential": credential}, status=status.HTTP_201_CREATED)


class WorkerDrainView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="workers_drain",
        summary="Stop placing new work on a worker (operators)",
        parameters=[WORKER],
        request=None,
        responses={200: s.WorkerSerializer},
        tags=["workers"],
    )
    def post(self, request, name: str):
        worker = drain_worker(request.user, name)
        return Response(s.WorkerSerializer(workers_with_load().get(pk=worker.pk)).data)


class WorkerUndrainView(IrisView):
    permission_classes = [ReadAnyWriteOperator]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="workers_undrain",
        summary="Place new work on a drained worker again (operators)",
        parameters=[WORKER],
        request=None,
        responses={200: s.WorkerSerializer},
        tags=["workers"],
    )
    def post(self, request, name: str):
        worker = undrain_worker(request.user, name)
        return Response(s.WorkerSerializer(workers_with_load().get(pk=worker.pk)).data)
