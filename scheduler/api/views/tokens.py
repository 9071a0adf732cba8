"""Tokens and who you are: ``tokens/``, ``me/``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from iris_web.client_address import AccountThrottle, ClientAddressThrottle

from scheduler.foundation import roles
from scheduler.foundation.access import api_tokens, mint_token, revoke_token
from scheduler.api import serializers as s
from scheduler.budgets.queries import budget_view
from scheduler.foundation.errors import NotFound

from scheduler.api.views.base import IrisView, path_parameter


# --- tokens and me --------------------------------------------------------------------------------


class TokenThrottle(ClientAddressThrottle):
    """Slows password guessing from one client address (the one IRIS_TRUSTED_PROXIES finds)."""

    rate = "30/minute"


class TokenAccountThrottle(AccountThrottle):
    """Slows guessing one account's password from many addresses."""

    rate = "30/minute"


class TokenView(IrisView):
    """``POST``: a password for a new token (anonymous, throttled). ``GET``: live tokens."""

    throttle_classes = [TokenThrottle, TokenAccountThrottle]
    error_statuses = ("400", "401", "403", "429")

    def get_authenticators(self):
        # Minting takes a password, not a token or a session; listing takes either.
        if self.request is not None and self.request.method == "POST":
            return []
        return super().get_authenticators()

    def get_permissions(self):
        if self.request is not None and self.request.method == "POST":
            return [AllowAny()]
        return super().get_permissions()

    def get_throttles(self):
        if self.request is not None and self.request.method == "POST":
            return super().get_throttles()
        return []

    @extend_schema(
        operation_id="tokens_create",
        summary="Exchange a username and password for a new API token (one per device or purpose)",
        request=s.TokenRequestSerializer,
        responses={200: s.TokenSerializer},
        auth=[],
        tags=["auth"],
    )
    def post(self, request):
        data = self.body()
        key, row = mint_token(data.get("username"), data.get("password"), data.get("name"), request=request._request)
        return Response(
            {
                "token": key,
                "id": row.token_key,
                "name": row.name,
                "username": row.user.username,
                "role": roles.role_name(row.user),
                "expires_at": row.expiry,
            }
        )

    @extend_schema(
        operation_id="tokens_list",
        summary="Your live API tokens (admins: anyone's, with ?user=NAME or ?user=*)",
        parameters=[s.TokenFilterSerializer],
        responses={200: s.TokenInfoSerializer(many=True)},
        tags=["auth"],
    )
    def get(self, request):
        f = self.filters(s.TokenFilterSerializer)
        rows = api_tokens(request.user, user=f.get("user"))
        current = getattr(request.auth, "digest", None)
        return Response(s.TokenInfoSerializer(rows, many=True, context={"current_digest": current}).data)


class TokenDetailView(IrisView):
    error_statuses = ("400", "401", "403", "404")

    @extend_schema(
        operation_id="tokens_destroy",
        summary="Revoke an API token (its owner or an admin)",
        parameters=[path_parameter("token_id", "the token's id, as listed")],
        responses={204: None},
        tags=["auth"],
    )
    def delete(self, request, token_id: str):
        revoke_token(request.user, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CurrentTokenView(IrisView):
    error_statuses = ("401", "404")

    @extend_schema(
        operation_id="tokens_current_destroy",
        summary="Revoke the token this request is made with (iris logout)",
        responses={204: None},
        tags=["auth"],
    )
    def delete(self, request):
        token_id = getattr(request.auth, "token_key", None)
        if token_id is None:
            raise NotFound("this request was not made with an API token")
        revoke_token(request.user, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(IrisView):
    error_statuses = ("401",)

    @extend_schema(
        operation_id="me_retrieve",
        summary="Who you are, your role and your budget",
        responses={200: s.MeSerializer},
        tags=["auth"],
    )
    def get(self, request):
        budget = budget_view(request.user.username)
        return Response(
            s.MeSerializer(
                {"username": request.user.username, "role": roles.role_name(request.user), "budget": budget}
            ).data
        )
