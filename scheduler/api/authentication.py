"""How API calls authenticate with a person's token.

knox's ``TokenAuthentication`` reads, on every call, all of the caller's other tokens to delete
the expired ones: one statement per API call, for rows that are refused anyway. This class
checks only the presented token (an expired one is refused and deleted, as in knox); the others
are deleted by the hourly ``scheduler.delete_expired_tokens`` task
(:func:`scheduler.foundation.access.delete_expired_tokens`).
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication


class ApiTokenAuthentication(TokenAuthentication):
    """knox's token authentication without its per-call scan of the user's other tokens."""

    def _cleanup_token(self, auth_token) -> bool:
        """True (and the token deleted) when the presented token has expired."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


class ApiTokenScheme(KnoxTokenScheme):
    """The schema's description of this class: knox's token scheme, unchanged."""

    target_class = "scheduler.api.authentication.ApiTokenAuthentication"
