"""Console forms. They shape what people type into what the use cases accept
(``scheduler.jobs.request`` for a job).

The use cases are the single source of validation (the API and the CLI meet the same rules):
a form checks only what its widgets need (a number is a number), hands the values to the
service, and shows the service's error on the field it names.
"""

from __future__ import annotations

import shlex
from decimal import Decimal
from typing import Any

from django import forms

from scheduler.budgets.writes import MAX_UPLIFT_SECONDS, MIN_UPLIFT_SECONDS
from scheduler.core.bands import Band

BAND_CHOICES = [(b.wire, b.name) for b in Band]
OPTIONAL_BAND_CHOICES = [("", "— keep —"), *BAND_CHOICES]
DEVICE_CHOICES = [("cpu", "CPU only"), ("gpu", "GPU"), ("tpu", "TPU")]
SECONDS_PER_HOUR = 3600


class JobForm(forms.Form):
    """A job submission, as the submit page and the what-if page ask for it."""

    name = forms.CharField(
        max_length=200, help_text="A short name (it becomes /<you>/<name>) or a full id /<you>/<name>/<child>."
    )
    priority = forms.ChoiceField(
        choices=[("", "Default (INTERACTIVE)"), *BAND_CHOICES],
        required=False,
        help_text="A child job inherits its parent's band. SYSTEM and PRODUCTION are for admins; a band above your max band is refused, never downgraded.",
    )
    system_reason = forms.CharField(
        max_length=500, required=False, help_text="SYSTEM only: name the hero, finelog or iris work."
    )
    replicas = forms.IntegerField(min_value=1, initial=1)
    # At least one millicore, as the API requires: a task of 0 cores ran with no resources.
    cpu = forms.DecimalField(min_value=Decimal("0.001"), decimal_places=3, initial=1, label="CPU cores")
    memory = forms.CharField(initial="1Gi", max_length=32, help_text="A size with its unit: 512Mi, 16Gi, 2G.")
    device_type = forms.ChoiceField(choices=DEVICE_CHOICES, initial="cpu", label="Accelerator")
    device_variant = forms.CharField(required=False, max_length=64, label="Variant", help_text="e.g. h100, v5p")
    device_count = forms.IntegerField(required=False, min_value=1, label="Chips per task")
    group_by = forms.CharField(
        required=False,
        max_length=64,
        label="Coschedule by",
        help_text="Place all tasks at once on workers sharing this attribute (e.g. tpu-name).",
    )
    scheduling_timeout_seconds = forms.IntegerField(
        required=False, min_value=1, label="Give up after (s)", help_text="Unschedulable if not placed by then."
    )
    command = forms.CharField(max_length=2000, help_text="The command to run, shell-quoted.")

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command") or ""
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split the command: {exc}") from None

    def service_data(self) -> dict[str, Any]:
        """The submission body :func:`scheduler.jobs.request.parse_job_request` reads (as the API's JSON)."""
        data = self.cleaned_data
        body: dict[str, Any] = {
            "name": data["name"],
            "replicas": data["replicas"],
            "cpu": float(data["cpu"]) if data.get("cpu") is not None else None,
            "memory": data.get("memory") or None,
            "command": data.get("command") or [],
        }
        if data.get("priority"):
            body["priority"] = data["priority"]
        if data.get("system_reason"):
            body["system_reason"] = data["system_reason"]
        if data.get("device_type") and data["device_type"] != "cpu":
            body["device"] = {
                "type": data["device_type"],
                "variant": data.get("device_variant") or "",
                "count": data.get("device_count"),
            }
        if data.get("group_by"):
            body["group_by"] = data["group_by"]
        if data.get("scheduling_timeout_seconds"):
            body["scheduling_timeout_seconds"] = data["scheduling_timeout_seconds"]
        # No argv: the console has no command line to keep, and the job records its request.
        return body


class WhatIfForm(JobForm):
    """A job to try against the live cluster; operators may ask on another user's behalf."""

    user = forms.CharField(required=False, max_length=150, help_text="Operators: ask as this user.")

    field_order = ["user"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["command"].required = False  # what-if runs nothing

    def service_data(self) -> dict[str, Any]:
        body = super().service_data()
        if self.cleaned_data.get("user"):
            body["user"] = self.cleaned_data["user"]
        return body


class BudgetForm(forms.Form):
    user = forms.CharField(max_length=150)
    new_user = forms.BooleanField(
        required=False, label="New user", help_text="Set up a budget for a name nobody has used yet, on purpose."
    )
    budget_limit = forms.IntegerField(
        required=False, min_value=0, label="Limit (points)", help_text="0 means unlimited. Leave empty to keep."
    )
    max_band = forms.ChoiceField(choices=OPTIONAL_BAND_CHOICES, required=False, label="Max band")
    reason = forms.CharField(max_length=2000, help_text="Why; kept in the audit log.")


def clean_hours(hours):
    """An uplift's duration in hours, bounded as the service bounds its seconds (one minute to
    90 days) but said in hours, the unit of the field."""
    if hours is None:
        return hours
    seconds = float(hours) * SECONDS_PER_HOUR
    if seconds < MIN_UPLIFT_SECONDS:
        raise forms.ValidationError("must be at least 0.02 hours (one minute)")
    if seconds > MAX_UPLIFT_SECONDS:
        raise forms.ValidationError(f"must be at most {MAX_UPLIFT_SECONDS // SECONDS_PER_HOUR:,} hours (90 days)")
    return hours


class UpliftRequestForm(forms.Form):
    max_band = forms.ChoiceField(
        choices=[("", "— no change —"), (Band.INTERACTIVE.wire, "INTERACTIVE"), (Band.BATCH.wire, "BATCH")],
        required=False,
        label="Max band",
    )
    budget_limit = forms.IntegerField(
        required=False, min_value=0, label="Limit (points)", help_text="0 asks for unlimited."
    )
    duration_hours = forms.DecimalField(
        min_value=0, decimal_places=2, initial=24, label="For (hours)", help_text="At most 90 days (2,160 hours)."
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)

    def clean_duration_hours(self):
        return clean_hours(self.cleaned_data.get("duration_hours"))

    def duration_seconds(self) -> int:
        return round(float(self.cleaned_data["duration_hours"]) * SECONDS_PER_HOUR)


class UpliftDecisionForm(forms.Form):
    duration_hours = forms.DecimalField(
        required=False,
        min_value=0,
        decimal_places=2,
        label="Expires after (hours)",
        help_text="Empty: as requested.",
    )
    note = forms.CharField(required=False, max_length=2000)

    def clean_duration_hours(self):
        return clean_hours(self.cleaned_data.get("duration_hours"))

    def duration_seconds(self) -> int | None:
        hours = self.cleaned_data.get("duration_hours")
        return None if hours is None else round(float(hours) * SECONDS_PER_HOUR)


class QueueFilterForm(forms.Form):
    user = forms.CharField(required=False, max_length=150)
    job = forms.CharField(
        required=False, max_length=255, help_text="/alice/train (and its children) or any part of an id"
    )
    band = forms.ChoiceField(choices=[("", "All bands"), *BAND_CHOICES], required=False)


SINCE_CHOICES = [
    ("", "Any time"),
    ("1h", "Last hour"),
    ("24h", "Last 24 hours"),
    ("7d", "Last 7 days"),
    ("30d", "Last 30 days"),
]
SINCE_SECONDS = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}


class PreemptionFilterForm(forms.Form):
    user = forms.CharField(required=False, max_length=150, help_text="whose work was preempted")
    band = forms.ChoiceField(choices=[("", "All bands"), *BAND_CHOICES], required=False, label="Victim band")
    since = forms.ChoiceField(choices=SINCE_CHOICES, required=False, label="When")
    job = forms.CharField(required=False, max_length=255, label="Victim job")
