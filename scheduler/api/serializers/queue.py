"""The queue as the newest tick published it."""

from __future__ import annotations

from rest_framework import serializers


# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
from scheduler.api.serializers.fields import BAND_WIRE, BandField, NullableBandField, TASK_STATES
from scheduler.api.serializers.jobs import EstimatedStartSerializer, PendingReasonField, ResourcesSerializer


# --- queue ----------------------------------------------------------------------------------------


class QueueEntrySerializer(serializers.Serializer):
    task = serializers.CharField()
    job = serializers.CharField()
    user = serializers.CharField()
    band = BandField(help_text="effective band")
    requested_band = NullableBandField()
    position = serializers.IntegerField(help_text="1-based, within the band, as of `tick`")
    band_pending = serializers.IntegerField(help_text="tasks the tick left pending in the band")
    resources = ResourcesSerializer(allow_null=True, help_text="per task")
    pending_reason = PendingReasonField()
    state = serializers.ChoiceField(choices=TASK_STATES, allow_null=True, help_text="now (the queue is as of the tick)")
    changed_since_tick = serializers.BooleanField(help_text="its state now is not pending")
    estimated_start = EstimatedStartSerializer(
        allow_null=True, help_text="null with a reason when there is not enough history"
    )
    estimated_start_reason = serializers.CharField(allow_blank=True)
    never = serializers.BooleanField(
        help_text="its job can never run on the cluster as it is (no healthy worker "
        "meets every requirement, even idle): the explain's verdict `never`"
    )


class QueueFilterSerializer(serializers.Serializer):
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    user = serializers.CharField(required=False, max_length=150)
    job = serializers.CharField(required=False, max_length=255)
