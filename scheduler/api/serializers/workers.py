"""Workers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
from scheduler.api.serializers.fields import DeviceSerializer, MemoryField, device_json


# --- workers --------------------------------------------------------------------------------------


class WorkerSerializer(serializers.Serializer):
    name = serializers.CharField()
    backend = serializers.CharField()
    healthy = serializers.BooleanField()
    draining = serializers.BooleanField()
    cpu = serializers.SerializerMethodField()
    cpu_millicores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    device = serializers.SerializerMethodField()
    attributes = serializers.DictField(child=serializers.CharField())
    registered_at = serializers.DateTimeField()
    last_heartbeat = serializers.DateTimeField(allow_null=True)
    active_tasks = serializers.SerializerMethodField()

    def get_cpu(self, worker) -> float:
        return worker.cpu_millicores / 1000

    @extend_schema_field(DeviceSerializer)
    def get_device(self, worker) -> dict:
        return device_json(worker.device_type, worker.device_variant, worker.device_count)

    @extend_schema_field({"type": "integer", "nullable": True})
    def get_active_tasks(self, worker) -> int | None:
        return getattr(worker, "active_tasks", None)


class WorkerRegisterSerializer(serializers.Serializer):
    name = serializers.CharField()
    cpu = serializers.FloatField(min_value=0, help_text="cores")
    memory = MemoryField()
    device = DeviceSerializer(required=False)
    attributes = serializers.DictField(child=serializers.CharField(), required=False)
    backend = serializers.CharField(required=False, default="local")


class HeartbeatSerializer(serializers.Serializer):
    healthy = serializers.BooleanField(required=False, default=True)
