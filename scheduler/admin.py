"""The Django admin, for raw data. Writes that carry policy go through the use cases (so they are
checked and audited exactly as from the console, the API and the CLI): budget edits, uplift
decisions, draining workers, cancelling jobs. Rows the use cases own are read-only here.
"""

from __future__ import annotations

from django.contrib import admin, messages

from scheduler import models
from scheduler.core.bands import Band
from scheduler.budgets.writes import approve_uplift, deny_uplift, set_budget
from scheduler.foundation.errors import ServiceError
from scheduler.execution.outbox import retry_intents
from scheduler.execution.workers import drain_worker
from scheduler.jobs.cancel import cancel_job

# What an admin-site edit writes into the audit log as its reason.
ADMIN_REASON = "edited in the Django admin"


def run_each(modeladmin, request, rows, action, done: str) -> None:
    """Apply a service to each selected row; report successes and each refusal by its message."""
    ok = 0
    for row in rows:
        try:
            action(row)
        except ServiceError as exc:
            modeladmin.message_user(request, f"{row}: {exc.message}", messages.ERROR)
        else:
            ok += 1
    if ok:
        modeladmin.message_user(request, f"{ok} {done}.", messages.SUCCESS)


class ActionsOnlyAdmin(admin.ModelAdmin):
    """Rows changed only through the services: the list's actions need change permission, but
    the row's own form stays read-only (editing a job's or worker's fields would bypass them)."""

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the scheduler or by the use cases: look, filter, search, never edit."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(models.Job)
class JobAdmin(ActionsOnlyAdmin):
    list_display = ("name", "user", "band", "state", "replicas", "created_at")
    list_filter = ("state", "band")
    search_fields = ("name", "user")
    readonly_fields = ("band", "submission_argv", "system_reason")
    actions = ["cancel_jobs"]

    @admin.action(description="Cancel the selected jobs (and their unfinished children)")
    def cancel_jobs(self, request, queryset):
        run_each(self, request, queryset, lambda job: cancel_job(request.user, job.name), "job(s) cancelled")


@admin.register(models.Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "job", "index", "state", "worker", "band", "preemption_count")
    list_filter = ("state", "band")
    list_select_related = ("job", "worker")
    raw_id_fields = ("job", "worker")


@admin.register(models.Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("task", "number", "worker", "state", "band", "created_at", "finished_at", "exit_code")
    list_filter = ("state", "band")
    list_select_related = ("task__job", "worker")


@admin.register(models.Worker)
class WorkerAdmin(ActionsOnlyAdmin):
    list_display = (
        "name",
        "backend",
        "healthy",
        "draining",
        "device_type",
        "device_variant",
        "device_count",
        "last_heartbeat",
    )
    list_filter = ("healthy", "draining", "backend", "device_type")
    search_fields = ("name",)
    actions = ["drain_workers"]

    @admin.action(description="Drain the selected workers (running work finishes, nothing new is placed)")
    def drain_workers(self, request, queryset):
        run_each(self, request, queryset, lambda w: drain_worker(request.user, w.name), "worker(s) draining")


@admin.register(models.UserBudget)
class UserBudgetAdmin(admin.ModelAdmin):
    """Saving goes through ``scheduler.budgets.writes.set_budget`` (admins only, validated, audited)."""

    list_display = ("user_id", "budget_limit", "max_band", "updated_at")
    search_fields = ("user_id",)

    def get_readonly_fields(self, request, obj=None):
        return ("user_id",) if obj else ()

    def save_model(self, request, obj, form, change):
        try:
            set_budget(
                request.user,
                obj.user_id,
                budget_limit=obj.budget_limit,
                max_band=Band(int(obj.max_band)).wire,
                reason=ADMIN_REASON,
            )
        except ServiceError as exc:
            self.message_user(request, exc.message, messages.ERROR)

    def has_delete_permission(self, request, obj=None):
        # Deleting a row would change a budget without an audit entry; set it instead.
        return False


@admin.register(models.UpliftGrant)
class UpliftGrantAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "user_id",
        "state",
        "max_band",
        "budget_limit",
        "duration_seconds",
        "created_at",
        "expires_at",
        "decided_by",
    )
    list_filter = ("state",)
    search_fields = ("user_id", "reason")
    list_select_related = ("decided_by",)
    actions = ["approve", "deny"]

    def has_change_permission(self, request, obj=None):
        # Actions need change permission on the list; the form itself stays read-only.
        return obj is None and request.user.has_perm("scheduler.change_upliftgrant")

    @admin.action(description="Approve the selected requests (for their requested duration)")
    def approve(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda g: approve_uplift(request.user, g.pk, note=ADMIN_REASON),
            "request(s) approved",
        )

    @admin.action(description="Deny the selected requests")
    def deny(self, request, queryset):
        run_each(
            self, request, queryset, lambda g: deny_uplift(request.user, g.pk, note=ADMIN_REASON), "request(s) denied"
        )


@admin.register(models.AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_name", "action", "target", "reason")
    list_filter = ("action",)
    search_fields = ("target", "actor_name", "reason")


@admin.register(models.PreemptionEvent)
class PreemptionEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "victim", "preemptor", "victim_band", "preemptor_band", "worker")
    list_filter = ("victim_band", "preemptor_band")
    list_select_related = ("victim__job", "preemptor__job", "worker")


@admin.register(models.TickRecord)
class TickRecordAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "duration_ms", "pending", "assigned", "preempted", "expired")
    exclude = ("explanation",)


@admin.register(models.DispatchIntent)
class DispatchIntentAdmin(ActionsOnlyAdmin):
    list_display = ("id", "kind", "task", "attempt_number", "worker", "state", "tries", "created_at", "last_error")
    list_filter = ("state", "kind")
    list_select_related = ("task__job", "worker")
    raw_id_fields = ("task", "worker")
    actions = ["retry"]

    @admin.action(description="Retry the selected failed intents at the next drain")
    def retry(self, request, queryset):
        changed = retry_intents(queryset.values_list("pk", flat=True))
        self.message_user(request, f"{changed} failed intent(s) will be sent again.", messages.SUCCESS)
