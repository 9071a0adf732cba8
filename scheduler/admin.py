"""The Django admin, for raw data. Writes that carry policy go through ``services``."""

from django.contrib import admin

from scheduler import models


@admin.register(models.Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "band", "state", "replicas", "created_at")
    list_filter = ("state", "band")
    search_fields = ("name", "user")
    readonly_fields = ("band", "submission_argv", "system_reason")


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "job", "index", "state", "worker", "band", "preemption_count")
    list_filter = ("state", "band")
    list_select_related = ("job", "worker")
    raw_id_fields = ("job", "worker")


@admin.register(models.Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("name", "backend", "healthy", "draining", "device_type", "device_variant", "device_count")
    list_filter = ("healthy", "backend", "device_type")
    search_fields = ("name",)


@admin.register(models.UserBudget)
class UserBudgetAdmin(admin.ModelAdmin):
    list_display = ("user_id", "budget_limit", "max_band", "updated_at")
    search_fields = ("user_id",)


@admin.register(models.PreemptionEvent)
class PreemptionEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "victim", "preemptor", "victim_band", "preemptor_band", "worker")
    list_select_related = ("victim__job", "preemptor__job", "worker")
    raw_id_fields = ("victim", "preemptor", "worker", "tick")


@admin.register(models.TickRecord)
class TickRecordAdmin(admin.ModelAdmin):
    list_display = ("started_at", "duration_ms", "pending", "assigned", "preempted", "expired")
    exclude = ("explanation",)


admin.site.register(models.UpliftGrant)
admin.site.register(models.AuditEntry)
