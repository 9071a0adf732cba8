"""API permissions, in the vocabulary of ``scheduler.foundation.roles`` (admin, operator, researcher).

These guard whole endpoints at the edge so the schema and the early 401/403 are right; the
use cases check again, because the console, the admin site and the CLI reach them too.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scheduler.foundation import roles


class IsResearcher(BasePermission):
    """Any signed-in user: researcher is the default role, operators and admins are researchers too."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)


class IsOperator(BasePermission):
    message = "only operators (group iris-operators) and admins may do this"

    def has_permission(self, request, view) -> bool:
        return roles.is_operator(request.user)


class IsAdmin(BasePermission):
    message = "only admins (group iris-admins) may do this"

    def has_permission(self, request, view) -> bool:
        return roles.is_admin(request.user)


class ReadAnyWriteOperator(BasePermission):
    """Everyone signed in reads; operators write."""

    message = IsOperator.message

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or roles.is_operator(request.user)


class ReadAnyWriteAdmin(BasePermission):
    """Everyone signed in reads; admins write."""

    message = IsAdmin.message

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or roles.is_admin(request.user)
