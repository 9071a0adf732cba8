"""The fields and small serializers every area shares: bands, memory, constraint values, devices, errors."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.types import JobState, TaskState
from scheduler.jobs.request import MAX_CONSTRAINT_VALUES
from scheduler.models import UpliftGrant

# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
JOB_NAME_PATTERN = r"^/?[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*$"

BAND_WIRE = [b.wire for b in BANDS_IN_ORDER]
BAND_SCHEMA = {"type": "string", "enum": BAND_WIRE}
NULLABLE_BAND_SCHEMA = {"type": "string", "enum": [*BAND_WIRE, None], "nullable": True}
TASK_STATES = [s.value for s in TaskState]
JOB_STATES = [s.value for s in JobState]
GRANT_STATES = [s.value for s in UpliftGrant.State]
DEVICE_TYPES = ["cpu", "gpu", "tpu"]


# --- shared fields --------------------------------------------------------------------------------


def band_wire(value: Band | int) -> str:
    """A :class:`Band` (or a band column's rank) as its lower-case name. Not a parser: a
    string is refused (ValueError), so no use case can hand a view a band as rendered text."""
    return Band(value).wire


@extend_schema_field(BAND_SCHEMA)
class BandField(serializers.Field):
    """A band (a :class:`Band`, or a rank from a row) rendered as its lower-case name."""

    def to_representation(self, value):
        return band_wire(value)


@extend_schema_field(NULLABLE_BAND_SCHEMA)
class NullableBandField(serializers.Field):
    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return None if value is None else band_wire(value)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 0, "description": "bytes"},
            {
                "type": "string",
                "example": "16Gi",
                "description": "a size: 512Mi, 16Gi, 2G, 1.5Gi; at most 1024Pi",
                "pattern": r"^\s*\d{1,30}(\.\d{1,30})?\s*([kKmMgGtTpP][iI]?)?[bB]?\s*$",
            },
        ]
    }
)
class MemoryField(serializers.Field):
    """Bytes as an integer, or a size string (documentation only: the use cases parse it)."""


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_CONSTRAINT_VALUES},
        ],
        "nullable": True,
        "description": "a string for eq/ne, a list of strings for in, absent for exists",
    }
)
class ConstraintValueField(serializers.Field):
    def to_representation(self, value):
        return value


class ErrorSerializer(serializers.Serializer):
    """Every error response: a stable code, a human message, and details (``field`` when one is at fault)."""

    code = serializers.ChoiceField(
        choices=[
            "INVALID_ARGUMENT",
            "UNAUTHENTICATED",
            "PERMISSION_DENIED",
            "NOT_FOUND",
            "FAILED_PRECONDITION",
            "RESOURCE_EXHAUSTED",
            "INTERNAL",
        ]
    )
    message = serializers.CharField()
    details = serializers.DictField(child=serializers.JSONField())


class DeviceSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=DEVICE_TYPES, default="cpu")
    variant = serializers.CharField(required=False, help_text="e.g. h100, v5p-8; gpu/tpu only")
    count = serializers.IntegerField(required=False, min_value=1, help_text="chips; gpu/tpu only")


def device_json(device_type: str, variant: str, count: int) -> dict:
    if device_type == "cpu":
        return {"type": "cpu"}
    return {"type": device_type, "variant": variant, "count": count}


class ConstraintSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="a worker attribute: device-type, device-variant, tpu-name, zone, ...")
    op = serializers.ChoiceField(choices=["eq", "ne", "in", "exists"], default="eq")
    value = ConstraintValueField(required=False)
    soft = serializers.BooleanField(default=False, help_text="soft constraints rank workers; hard ones filter")
