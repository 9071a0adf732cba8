"""Budgets, uplift grants and the audit log."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.foundation.inputs import MAX_BUDGET_POINTS

# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).
from scheduler.api.serializers.fields import BAND_WIRE, BandField, GRANT_STATES, NullableBandField
from scheduler.api.serializers.jobs import NullableDowngradeTextField


# --- uplift grants --------------------------------------------------------------------------------


class UpliftSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    user = serializers.CharField(source="user_id")
    state = serializers.ChoiceField(choices=GRANT_STATES)
    max_band = NullableBandField()
    budget_limit = serializers.IntegerField(allow_null=True, help_text="points; 0 = unlimited; null = not raised")
    reason = serializers.CharField()
    duration_seconds = serializers.IntegerField()
    requested_by = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_note = serializers.CharField()
    starts_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_requested_by(self, grant) -> str | None:
        return grant.requested_by.username if grant.requested_by else None

    @extend_schema_field({"type": "string", "nullable": True})
    def get_decided_by(self, grant) -> str | None:
        return grant.decided_by.username if grant.decided_by else None


class UpliftTaskMoveSerializer(serializers.Serializer):
    task = serializers.CharField()
    job = serializers.CharField()
    requested_band = BandField(source="requested")
    band_before = BandField()
    position_before = serializers.IntegerField(help_text="1-based place in band_before at the newest tick")
    band_pending_before = serializers.IntegerField()
    band_after = BandField()
    position_after = serializers.IntegerField(
        allow_null=True, help_text="1-based place in band_after at the next tick; null when it would start"
    )
    band_pending_after = serializers.IntegerField()
    starts_on = serializers.CharField(allow_null=True, help_text="the worker it would be placed on at once")


class UpliftPreviewSerializer(serializers.Serializer):
    uplift = serializers.IntegerField(source="grant.pk")
    user = serializers.CharField(source="preview.user")
    spend = serializers.IntegerField(source="preview.spend", help_text="points, as the tick decided with")
    limit_before = serializers.IntegerField(source="preview.limit_before", help_text="points; 0 = unlimited")
    limit_after = serializers.IntegerField(source="preview.limit_after", help_text="points; 0 = unlimited")
    tasks = UpliftTaskMoveSerializer(source="preview.tasks", many=True)
    unchanged = serializers.IntegerField(
        source="preview.unchanged", help_text="the user's queued tasks that keep their band"
    )
    starting = serializers.IntegerField(source="preview.starting")
    preemptible = serializers.SerializerMethodField()
    at_rest = serializers.BooleanField(source="preview.at_rest")
    tick = serializers.IntegerField()
    tick_at = serializers.DateTimeField()

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}, "example": {"batch": 12}})
    def get_preemptible(self, obj) -> dict:
        return {band.wire: n for band, n in obj.preview.preemptible.items()}


def uplift_preview_json(gp) -> dict:
    """:class:`UpliftPreviewSerializer`'s rendering, written out: hundreds of moved tasks made
    DRF's per-field machinery a fifth of a preview's CPU (a test holds the two equal)."""
    p = gp.preview
    return {
        "uplift": gp.grant.pk,
        "user": p.user,
        "spend": p.spend,
        "limit_before": p.limit_before,
        "limit_after": p.limit_after,
        "tasks": [
            {
                "task": m.task,
                "job": m.job,
                "requested_band": m.requested.wire,
                "band_before": m.band_before.wire,
                "position_before": m.position_before,
                "band_pending_before": m.band_pending_before,
                "band_after": m.band_after.wire,
                "position_after": m.position_after,
                "band_pending_after": m.band_pending_after,
                "starts_on": m.starts_on,
            }
            for m in p.tasks
        ],
        "unchanged": p.unchanged,
        "starting": p.starting,
        "preemptible": {band.wire: n for band, n in p.preemptible.items()},
        "at_rest": p.at_rest,
        "tick": gp.tick,
        "tick_at": serializers.DateTimeField().to_representation(gp.tick_at),
    }


class UpliftRequestSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="defaults to you; researchers ask only for themselves")
    max_band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    budget_limit = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_BUDGET_POINTS, help_text="points; 0 = unlimited"
    )
    reason = serializers.CharField()
    duration_seconds = serializers.IntegerField(min_value=60, max_value=90 * 24 * 3600)


class UpliftDecisionSerializer(serializers.Serializer):
    duration_seconds = serializers.IntegerField(
        required=False,
        min_value=60,
        max_value=90 * 24 * 3600,
        help_text="approve only; defaults to the requested duration",
    )
    note = serializers.CharField(required=False, allow_blank=True)


class UpliftFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, max_length=150)
    state = serializers.ChoiceField(choices=GRANT_STATES, required=False)


# --- budgets --------------------------------------------------------------------------------------


class BudgetSerializer(serializers.Serializer):
    """A user's budget: configured (row or defaults), effective now (with grants), spend now."""

    user = serializers.CharField()
    has_row = serializers.BooleanField(help_text="false: the cluster defaults apply")
    budget_limit = serializers.IntegerField(help_text="points; 0 = unlimited")
    max_band = BandField()
    effective_budget_limit = serializers.IntegerField(help_text="after active uplift grants; 0 = unlimited")
    effective_max_band = BandField()
    spend = serializers.IntegerField(
        help_text="points held by active tasks requested above BATCH, as the newest tick (spend_tick) left them"
    )
    spend_tick = serializers.IntegerField(
        allow_null=True, help_text="the tick spend is as of; null: summed live (no tick in the last 30 s or 3 beats)"
    )
    spend_at = serializers.DateTimeField(allow_null=True, help_text="when that tick started")
    effective_band = BandField(help_text="the band INTERACTIVE work of this user runs as now")
    over_budget = serializers.BooleanField()
    downgrade = NullableDowngradeTextField(
        help_text='what the budget does to INTERACTIVE work now, e.g. "INTERACTIVE runs as BATCH: spend 12,400 > '
        'limit 10,000"; null when it runs as requested'
    )
    grants = UpliftSerializer(many=True, help_text="open grants: requested, or approved and not expired")


class BudgetUpdateSerializer(serializers.Serializer):
    budget_limit = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_BUDGET_POINTS, help_text="points; 0 = unlimited"
    )
    max_band = serializers.ChoiceField(choices=BAND_WIRE, required=False)
    reason = serializers.CharField(help_text="why; kept in the audit log")
    create_user_budget = serializers.BooleanField(
        required=False,
        default=False,
        help_text="set a budget for a user nobody knows yet (no account, budget, grant or job): on purpose only",
    )


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=["admin", "operator", "researcher"])
    budget = BudgetSerializer()


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    actor = serializers.CharField(source="actor_name")
    action = serializers.CharField()
    target = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
