"""Endpoints for machines: ``/healthz`` (the process answers), ``/readyz`` (its dependencies
answer; 503 naming the failed checks) and ``/metrics`` (Prometheus text format).

Probes carry no credentials, so health and readiness are open and say nothing secret (check
names, timings, counts). ``/metrics`` answers clients in ``IRIS_METRICS_ALLOW`` (networks) and
operators (an API token, ``Authorization: Token ...``, or a console session); others get 403.
"""

from __future__ import annotations

import ipaddress
import os
import time
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST
from knox.auth import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from scheduler.foundation import roles
from scheduler.observability import health, metrics


@never_cache
@require_GET
def healthz(request):
    """Alive: the process serves requests. Touches no dependency (that is /readyz)."""
    return JsonResponse({"status": "ok", "pid": os.getpid(), "time": time.time()})


@never_cache
@require_GET
def readyz(request):
    """200 when every check passes, 503 naming the failed ones; each check's status and time."""
    result = health.readiness()
    return JsonResponse(result.as_json(), status=200 if result.ok else 503)


@lru_cache(maxsize=1)
def allowed_networks() -> tuple:
    return tuple(ipaddress.ip_network(n, strict=False) for n in settings.METRICS_ALLOW)


def may_scrape(request) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        address = None
    if address is not None and any(address in network for network in allowed_networks()):
        return True
    try:
        authenticated = TokenAuthentication().authenticate(request)
    except AuthenticationFailed:
        return False
    user = authenticated[0] if authenticated else request.user
    return roles.is_operator(user)


@never_cache
@require_GET
def metrics_view(request):
    if not may_scrape(request):
        return JsonResponse(
            {
                "code": "PERMISSION_DENIED",
                "message": "metrics are for operators and the networks in IRIS_METRICS_ALLOW",
                "details": {},
            },
            status=403,
        )
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)
