"""Roles shared by the console, the API and the admin site.

A user is an **admin** when they are a superuser or in the ``iris-admins`` group, an **operator**
when in ``iris-operators`` (admins are operators too), and a **researcher** otherwise.

The groups also carry the Django admin site's model permissions (``GROUP_PERMISSIONS``), so a
staff admin or operator sees the raw data there without being a superuser. Every write with
policy still goes through the services (the admin site's actions call them), so "change" here
means "may use the actions", never "may edit the row".
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


# What each group may do in the Django admin site: {app label: {model: actions}}.
READ_ALL = {
    model: ("view",)
    for model in (
        "job",
        "task",
        "attempt",
        "worker",
        "userbudget",
        "upliftgrant",
        "auditentry",
        "preemptionevent",
        "tickrecord",
        "dispatchintent",
    )
}
GROUP_PERMISSIONS = {
    # Operators inspect everything, drain workers and retry failed dispatch intents.
    OPERATOR_GROUP: {"scheduler": {**READ_ALL, "worker": ("view", "change"), "dispatchintent": ("view", "change")}},
    # Admins also cancel jobs, set budgets and decide uplift requests, and can see who the users are.
    ADMIN_GROUP: {
        "scheduler": {
            **READ_ALL,
            "job": ("view", "change"),
            "worker": ("view", "change"),
            "dispatchintent": ("view", "change"),
            "userbudget": ("view", "add", "change"),
            "upliftgrant": ("view", "change"),
        },
        "auth": {"user": ("view",), "group": ("view",)},
    },
}


def group_permissions(group_name: str):
    from django.contrib.auth.models import Permission
    from django.db.models import Q

    wanted = Q(pk__in=[])
    for app_label, models in GROUP_PERMISSIONS[group_name].items():
        codenames = [f"{action}_{model}" for model, actions in models.items() for action in actions]
        wanted |= Q(content_type__app_label=app_label, codename__in=codenames)
    return Permission.objects.filter(wanted)


def ensure_groups() -> tuple[Group, Group]:
    """The admin and operator groups, with their admin-site permissions (idempotent)."""
    admins, _ = Group.objects.get_or_create(name=ADMIN_GROUP)
    operators, _ = Group.objects.get_or_create(name=OPERATOR_GROUP)
    for group in (admins, operators):
        group.permissions.set(group_permissions(group.name))
    return admins, operators


def ensure_groups_after_migrate(sender, **kwargs) -> None:
    """``post_migrate`` receiver: every migrated database has the groups and their permissions
    (Django creates the permission rows in its own receiver, which runs first)."""
    ensure_groups()
