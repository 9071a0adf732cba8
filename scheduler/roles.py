"""Roles shared by the console, the API and the admin site.

A user is an **admin** when they are a superuser or in the ``iris-admins`` group, an **operator**
when in ``iris-operators`` (admins are operators too), and a **researcher** otherwise.
"""

from __future__ import annotations

from django.contrib.auth.models import Group

ADMIN_GROUP = "iris-admins"
OPERATOR_GROUP = "iris-operators"


def _groups(user) -> set[str]:
    cached = getattr(user, "_iris_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True)) if user.is_authenticated else set()
        user._iris_groups = cached
    return cached


def is_admin(user) -> bool:
    return bool(user.is_authenticated and (user.is_superuser or ADMIN_GROUP in _groups(user)))


def is_operator(user) -> bool:
    return is_admin(user) or bool(user.is_authenticated and OPERATOR_GROUP in _groups(user))


def role_name(user) -> str:
    if is_admin(user):
        return "admin"
    if is_operator(user):
        return "operator"
    return "researcher"


def ensure_groups() -> tuple[Group, Group]:
    admins, _ = Group.objects.get_or_create(name=ADMIN_GROUP)
    operators, _ = Group.objects.get_or_create(name=OPERATOR_GROUP)
    return admins, operators
