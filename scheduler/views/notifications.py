"""The notification settings page (``settings/notifications/``): what you are told of, by email
and webhook, and the state of your newest notifications ("sent", "retrying", "failed").

The form posts with HTMX (``hx-post``, CSRF token in the form) and gets its own section back;
without JavaScript it is an ordinary POST that redirects. The deliveries table refreshes itself.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from scheduler.foundation.errors import ServiceError
from scheduler.notifications.preferences import (
    MAX_SECRET_LENGTH,
    MAX_URL_LENGTH,
    MIN_SECRET_LENGTH,
    preferences_of,
    recent_deliveries,
    update_preferences,
)
from scheduler.notifications.topics import ALL_TOPICS
from scheduler.views.common import POLL_SECONDS, apply_service_error, page_or_fragment

TOPIC_LABELS = {
    "started": "a task of my job started",
    "finished": "my job finished and succeeded",
    "failed": "my job ended otherwise (failed, killed, lost, unschedulable)",
    "preempted": "a task of my job was preempted",
    "downgraded": "my job now queues as BATCH (I am over my limit)",
    "uplift_requested": "someone requested an uplift (admins)",
}
assert set(TOPIC_LABELS) == set(ALL_TOPICS)


class NotificationForm(forms.Form):
    email_events = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="By email")
    webhook_events = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="By webhook")
    webhook_url = forms.CharField(
        required=False,
        max_length=MAX_URL_LENGTH,
        label="Webhook URL",
        help_text="Events are POSTed here as JSON, signed (X-Iris-Signature). Empty removes the webhook.",
    )
    webhook_secret = forms.CharField(
        required=False,
        max_length=MAX_SECRET_LENGTH,
        widget=forms.PasswordInput(render_value=False),
        label="Webhook secret",
        help_text=f"{MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters; leave empty to keep the one set.",
    )

    def __init__(self, *args, choices: tuple[str, ...], **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("email_events", "webhook_events"):
            self.fields[name].choices = [(c, TOPIC_LABELS[c]) for c in choices]

    def service_data(self) -> dict:
        data = {
            "email_events": self.cleaned_data["email_events"],
            "webhook_events": self.cleaned_data["webhook_events"],
            "webhook_url": self.cleaned_data["webhook_url"],
        }
        if self.cleaned_data["webhook_secret"]:
            data["webhook_secret"] = self.cleaned_data["webhook_secret"]
        return data


@login_required
@require_http_methods(["GET", "POST"])
def notification_settings(request):
    prefs = preferences_of(request.user)
    status = 200
    if request.method == "POST":
        form = NotificationForm(request.POST, choices=prefs.choices)
        if form.is_valid():
            try:
                prefs = update_preferences(request.user, form.service_data())
            except ServiceError as exc:
                apply_service_error(form, exc)
                status = 400
            else:
                if not request.htmx:
                    messages.success(request, "Notification settings saved.")
                    return redirect("console:notification-settings")
                form = _form(prefs)
                form.saved = True
        else:
            status = 400
    else:
        form = _form(prefs)
    context = {
        "prefs": prefs,
        "form": form,
        "deliveries": recent_deliveries(request.user),
        "poll_seconds": POLL_SECONDS * 2,
    }
    fragment = "deliveries" if request.htmx and request.GET.get("part") == "deliveries" else "settings"
    return page_or_fragment(request, "scheduler/notification_settings.html", fragment, context, status=status)


def _form(prefs) -> NotificationForm:
    return NotificationForm(
        initial={
            "email_events": list(prefs.email_events),
            "webhook_events": list(prefs.webhook_events),
            "webhook_url": prefs.webhook_url,
        },
        choices=prefs.choices,
    )
