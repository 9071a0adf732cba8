"""The client's address, for login lockouts and API throttles: believe ``X-Forwarded-For`` only
from the proxies in ``IRIS_TRUSTED_PROXIES``.

Walking ``X-Forwarded-For`` from the right (the hop nearest us) while the hop is a trusted proxy,
the first untrusted address is the client. A peer that is not a trusted proxy is the client
itself, whatever headers it sends: a rotating ``X-Forwarded-For`` from it changes nothing.
"""

from __future__ import annotations

import ipaddress

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address) -> bool:
    return address is not None and any(address in network for network in settings.TRUSTED_PROXIES)


def client_address(request) -> str:
    """The address of the client that sent ``request`` (a string, as Django's REMOTE_ADDR)."""
    peer = request.META.get("REMOTE_ADDR", "")
    current = _address(peer)
    if not _trusted(current):
        return peer
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:  # garbage in the chain: trust nothing beyond it
            return str(current)
        current = address
        if not _trusted(address):
            return str(address)
    return str(current)


class LoginLockoutBackend(AxesStandaloneBackend):
    """django-axes' lockout for logins that come with a request: the console's, and the API
    token endpoint's (``iris login``), which also has its throttles. Authentication without a
    request (a management command) is not counted: axes could not tell whose address it is."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class ClientAddressThrottle(AnonRateThrottle):
    """DRF's anonymous throttle, counting by ``client_address``."""

    def get_ident(self, request):
        return client_address(request)


class AccountThrottle(SimpleRateThrottle):
    """Counts requests per submitted ``username`` (case-insensitive), whoever sends them."""

    scope = "account"

    def get_cache_key(self, request, view):
        username = request.data.get("username") if hasattr(request.data, "get") else None
        if not isinstance(username, str) or not username:
            return None
        return self.cache_format % {"scope": self.scope, "ident": username.strip().lower()[:150]}


def lockout_response(request, original_response=None, credentials=None):
    """django-axes' answer to a locked-out login (``AXES_LOCKOUT_CALLABLE``): on the API the
    JSON error every API answer has, so ``iris login`` prints it; on the console axes' text."""
    from django.conf import settings
    from django.http import HttpResponse, JsonResponse

    from axes.helpers import get_lockout_message

    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    if request.path.startswith("/api/"):
        response = JsonResponse(
            {
                "code": "RESOURCE_EXHAUSTED",
                "message": f"too many failed logins for this account or address: locked for {minutes} minutes "
                "(an admin can lift it: manage.py axes_reset)",
                "details": {"lockout_minutes": minutes},
            },
            status=429,
        )
        response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
        return response
    return HttpResponse(get_lockout_message(), status=settings.AXES_HTTP_RESPONSE_CODE)
