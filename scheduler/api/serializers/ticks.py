"""Preemptions, tick records, what-if and fairness."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers


# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
from scheduler.api.serializers.fields import BAND_WIRE, BandField, NullableBandField
from scheduler.api.serializers.jobs import EstimatedStartSerializer, FeasibilitySerializer, PendingReasonField


# --- preemptions and ticks ------------------------------------------------------------------------


class PreemptionSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    victim = serializers.SerializerMethodField()
    preemptor = serializers.SerializerMethodField()
    victim_band = BandField()
    preemptor_band = BandField()
    worker = serializers.SerializerMethodField()
    tick = serializers.IntegerField(source="tick_id", allow_null=True)
    reason = serializers.CharField()
    at = serializers.DateTimeField(source="created_at")

    def get_victim(self, event) -> str:
        return f"{event.victim.job.name}/{event.victim.index}"

    def get_preemptor(self, event) -> str:
        return f"{event.preemptor.job.name}/{event.preemptor.index}"

    @extend_schema_field({"type": "string", "nullable": True})
    def get_worker(self, event) -> str | None:
        return event.worker.name if event.worker_id else None


class PreemptionFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, max_length=150, help_text="the victim's user")
    band = serializers.ChoiceField(choices=BAND_WIRE, required=False, help_text="the victim's band")
    since = serializers.DateTimeField(required=False, help_text="ISO 8601")
    job = serializers.CharField(required=False, max_length=255, help_text="the victim's job id")


class TickSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    started_at = serializers.DateTimeField()
    now_ms = serializers.IntegerField()
    duration_ms = serializers.FloatField()
    decide_ms = serializers.FloatField()
    pending = serializers.IntegerField(help_text="PENDING when the tick started")
    left_pending = serializers.IntegerField(help_text="tasks the tick left pending: the sum of its queue's band counts")
    assigned = serializers.IntegerField()
    preempted = serializers.IntegerField()
    expired = serializers.IntegerField()


class TickFilterSerializer(serializers.Serializer):
    limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=20)


class TickRunSerializer(serializers.Serializer):
    tick_id = serializers.IntegerField()
    assigned = serializers.IntegerField()
    preempted = serializers.IntegerField()
    expired = serializers.IntegerField()
    skipped_conflicts = serializers.IntegerField()
    duration_ms = serializers.FloatField()


# --- what-if --------------------------------------------------------------------------------------


class WhatIfErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class WhatIfBasisSerializer(serializers.Serializer):
    source = serializers.ChoiceField(
        choices=["tick", "live"],
        help_text=(
            "tick: the newest tick's free capacity and queue (spend and budget live); live: the whole "
            "live snapshot, before any tick"
        ),
    )
    tick = serializers.IntegerField(allow_null=True)
    tick_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="WhatIf")
class WhatIfSerializer(serializers.Serializer):
    accepted = serializers.BooleanField(
        help_text="the submission rules would accept it (see `never`: accepted is not 'would run')"
    )
    never = serializers.BooleanField(
        help_text="accepted, but it can never run on the cluster as it is (feasibility.verdict `never`)"
    )
    error = WhatIfErrorSerializer(allow_null=True)
    job = serializers.CharField(allow_null=True, help_text="the id the job would get")
    requested_band = NullableBandField()
    effective_band = NullableBandField()
    spend = serializers.IntegerField(allow_null=True)
    limit = serializers.IntegerField(allow_null=True)
    position = serializers.IntegerField(allow_null=True, help_text="in its band's queue, if it would wait")
    would_place = serializers.BooleanField()
    worker = serializers.CharField(allow_null=True, help_text="where its first task would go")
    would_preempt = serializers.ListField(child=serializers.CharField())
    pending_reason = PendingReasonField(allow_null=True)
    feasibility = FeasibilitySerializer(allow_null=True, required=False)
    estimated_start = EstimatedStartSerializer(
        allow_null=True, required=False, help_text="no earlier than the task just ahead of it"
    )
    estimated_start_text = serializers.CharField(required=False, help_text='e.g. "would start in about 20-45 min"')
    basis = WhatIfBasisSerializer(allow_null=True, required=False, help_text="what the answer stands on")


class FairnessUserSerializer(serializers.Serializer):
    user = serializers.CharField()
    running_value = serializers.IntegerField(
        help_text="resource value of the user's tasks running in the band after the tick"
    )
    share = serializers.FloatField(help_text="running_value / the band's running value (0 to 1)")
    equal_share = serializers.FloatField(help_text="1 / the number of users with demand in the band")
    pending = serializers.IntegerField(help_text="the user's tasks the tick left pending in the band")
    over_budget = serializers.BooleanField(help_text="spend at the tick was over the user's limit")
    got_turn = serializers.BooleanField(help_text="at least one of the user's tasks was placed in the band this tick")


class SmallestWaitingSerializer(serializers.Serializer):
    job = serializers.CharField()
    user = serializers.CharField()
    task = serializers.CharField(help_text="its first pending task, whose reason this is")
    value = serializers.IntegerField(help_text="resource value of one task")
    pending = serializers.IntegerField()
    reason = serializers.DictField(help_text="the pending reason record (code, parameters) and its text")


class FairnessBandSerializer(serializers.Serializer):
    band = BandField()
    running_value = serializers.IntegerField()
    users = FairnessUserSerializer(many=True)
    smallest_waiting = SmallestWaitingSerializer(allow_null=True, help_text="the smallest job the tick left waiting")


class LostWorkSerializer(serializers.Serializer):
    user = serializers.CharField()
    preemptions = serializers.IntegerField()
    point_hours = serializers.FloatField(help_text="sum over evictions of resource value x hours the attempt had run")


class StarvingTaskSerializer(serializers.Serializer):
    task = serializers.CharField()
    job = serializers.CharField()
    user = serializers.CharField()
    band = NullableBandField(help_text="the band it was last stamped at")
    state = serializers.CharField()
    preemptions = serializers.IntegerField()
    history = serializers.CharField(help_text="the job's page: its preemptions suffered")


class FairnessSerializer(serializers.Serializer):
    tick = serializers.IntegerField(allow_null=True, help_text="the tick the per-band numbers are from")
    tick_at = serializers.DateTimeField(allow_null=True)
    bands = FairnessBandSerializer(many=True)
    since = serializers.DateTimeField(help_text="start of the 24-hour window of lost_work and starving")
    lost_work = LostWorkSerializer(many=True)
    starvation_threshold = serializers.IntegerField(help_text="starving: preempted more than this many times")
    starving = StarvingTaskSerializer(many=True)
