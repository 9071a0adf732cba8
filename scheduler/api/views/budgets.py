"""Budgets, uplift grants and the audit log."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from scheduler.foundation import roles
from scheduler.api import serializers as s
from scheduler.api.permissions import IsAdmin, ReadAnyWriteAdmin
from scheduler.budgets.queries import audit_entries, budget_view, budget_views, uplift_grants, user_is_known
from scheduler.budgets.preview import preview_grant
from scheduler.budgets.writes import approve_uplift, deny_uplift, request_uplift, set_budget
from scheduler.foundation.errors import InvalidArgument, NotFound, PermissionDenied

from scheduler.api.views.base import IrisView, PAGE_PARAMETERS, paginated, path_parameter


# --- budgets --------------------------------------------------------------------------------------


class BudgetsView(IrisView):
    error_statuses = ("401",)

    @extend_schema(
        operation_id="budgets_list",
        summary="Every user with a budget row, an open grant or spend, with spend as the newest tick left it",
        responses={200: s.BudgetSerializer(many=True)},
        tags=["budgets"],
    )
    def get(self, request):
        return Response(s.BudgetSerializer(budget_views(), many=True).data)


USER = path_parameter("user", "the budget identity (username)")


class BudgetView(IrisView):
    permission_classes = [ReadAnyWriteAdmin]
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="budgets_retrieve",
        summary="One user's budget, effective values and spend",
        parameters=[USER],
        responses={200: s.BudgetSerializer},
        tags=["budgets"],
    )
    def get(self, request, user: str):
        if not user_is_known(user):
            raise NotFound(f"no user, budget, grant or job named {user!r}", field="user")
        return Response(s.BudgetSerializer(budget_view(user)).data)

    @extend_schema(
        operation_id="budgets_update",
        summary="Set a user's budget (admins); omitted values keep their current value",
        parameters=[USER],
        request=s.BudgetUpdateSerializer,
        responses={200: s.BudgetSerializer},
        tags=["budgets"],
    )
    def put(self, request, user: str):
        data = self.body()
        known = {"budget_limit", "max_band", "reason", "create_user_budget"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown field; known fields are {', '.join(sorted(known))}", field=unknown[0])
        row = set_budget(
            request.user,
            user,
            budget_limit=data.get("budget_limit"),
            max_band=data.get("max_band"),
            reason=data.get("reason"),
            create_user_budget=data.get("create_user_budget", False),
        )
        return Response(s.BudgetSerializer(budget_view(row.user_id)).data)


# --- uplift grants --------------------------------------------------------------------------------


class UpliftsView(IrisView):
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="uplifts_list",
        summary="Uplift grants, newest first (researchers see their own)",
        parameters=[s.UpliftFilterSerializer, *PAGE_PARAMETERS],
        responses={200: paginated(s.UpliftSerializer, "PaginatedUpliftList")},
        tags=["uplifts"],
    )
    def get(self, request):
        f = self.filters(s.UpliftFilterSerializer)
        user = f.get("user")
        if not roles.is_operator(request.user):
            if user and user != request.user.username:
                raise PermissionDenied("researchers see only their own uplifts", field="user")
            user = request.user.username
        return self.paginate(uplift_grants(user=user, state=f.get("state")), s.UpliftSerializer)

    @extend_schema(
        operation_id="uplifts_create",
        summary="Request a time-bounded raise of max_band and/or budget_limit",
        request=s.UpliftRequestSerializer,
        responses={201: s.UpliftSerializer},
        tags=["uplifts"],
    )
    def post(self, request):
        data = self.body()
        unknown = sorted(set(data) - {"user", "max_band", "budget_limit", "reason", "duration_seconds"})
        if unknown:
            raise InvalidArgument(
                "unknown field; known fields are user, max_band, budget_limit, reason, duration_seconds",
                field=unknown[0],
            )
        grant = request_uplift(
            request.user,
            user=data.get("user"),
            max_band=data.get("max_band"),
            budget_limit=data.get("budget_limit"),
            reason=data.get("reason"),
            duration_seconds=data.get("duration_seconds"),
        )
        return Response(s.UpliftSerializer(grant).data, status=status.HTTP_201_CREATED)


GRANT_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the grant's id")


class UpliftDecisionView(IrisView):
    permission_classes = [IsAdmin]
    error_statuses = ("400", "401", "403", "404", "409")
    approve = True

    def post(self, request, id: str):
        data = self.body()
        unknown = sorted(
            set(data) - {"duration_seconds", "note"} - ({"duration_seconds"} if not self.approve else set())
        )
        if unknown:
            raise InvalidArgument("unknown field; known fields are duration_seconds, note", field=unknown[0])
        if self.approve:
            grant = approve_uplift(
                request.user, id, duration_seconds=data.get("duration_seconds"), note=data.get("note")
            )
        else:
            grant = deny_uplift(request.user, id, note=data.get("note"))
        return Response(s.UpliftSerializer(grant).data)


class UpliftApproveView(UpliftDecisionView):
    approve = True

    @extend_schema(
        operation_id="uplifts_approve",
        summary="Approve a requested grant (admins): it starts now",
        parameters=[GRANT_ID],
        request=s.UpliftDecisionSerializer,
        responses={200: s.UpliftSerializer},
        tags=["uplifts"],
    )
    def post(self, request, id: str):
        return super().post(request, id)


class UpliftPreviewView(IrisView):
    permission_classes = [IsAdmin]
    error_statuses = ("400", "401", "403", "404", "409")

    @extend_schema(
        operation_id="uplifts_preview",
        summary="What approving a requested grant would do at the next tick (admins); writes nothing",
        parameters=[GRANT_ID],
        request=None,
        responses={200: s.UpliftPreviewSerializer},
        tags=["uplifts"],
    )
    def post(self, request, id: str):
        data = self.body()
        if data:
            raise InvalidArgument("expected an empty body: a preview takes no fields", field=sorted(data)[0])
        return Response(s.uplift_preview_json(preview_grant(request.user, id)))


class UpliftDenyView(UpliftDecisionView):
    approve = False

    @extend_schema(
        operation_id="uplifts_deny",
        summary="Deny a requested grant (admins)",
        parameters=[GRANT_ID],
        request=s.UpliftDecisionSerializer,
        responses={200: s.UpliftSerializer},
        tags=["uplifts"],
    )
    def post(self, request, id: str):
        return super().post(request, id)


class AuditView(IrisView):
    permission_classes = [IsAdmin]
    error_statuses = ("401", "403", "404")

    @extend_schema(
        operation_id="audit_list",
        summary="Budget and grant changes, newest first (admins)",
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(s.AuditEntrySerializer, "PaginatedAuditList")},
        tags=["budgets"],
    )
    def get(self, request):
        return self.paginate(audit_entries(), s.AuditEntrySerializer)
