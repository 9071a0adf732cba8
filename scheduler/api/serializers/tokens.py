"""Tokens and who you are."""

from __future__ import annotations

from rest_framework import serializers


# What a job name may be, as the schema states it: one segment (``train``) or a full id
# (``/alice/train/eval``), segments of letters, digits and . _ - + @ (no ':' and no spaces).


# --- tokens and me --------------------------------------------------------------------------------


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"})
    name = serializers.CharField(
        required=False, max_length=100, help_text="the device or purpose, e.g. 'iris CLI on laptop'"
    )


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown this once; the server keeps only its hash")
    id = serializers.CharField(help_text="the token's public id (its first characters), to list and revoke it")
    name = serializers.CharField()
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=["admin", "operator", "researcher"])
    expires_at = serializers.DateTimeField()


class TokenInfoSerializer(serializers.Serializer):
    """A live API token as listed: never the token itself."""

    id = serializers.CharField(source="token_key")
    name = serializers.CharField()
    username = serializers.CharField(source="user.username")
    created_at = serializers.DateTimeField(source="created")
    expires_at = serializers.DateTimeField(source="expiry", allow_null=True)
    current = serializers.SerializerMethodField(help_text="the token this request was made with")

    def get_current(self, token) -> bool:
        return token.digest == self.context.get("current_digest")


class TokenFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="another user's tokens, or '*' for everyone's (admins)")


class WorkerCredentialSerializer(serializers.Serializer):
    worker = serializers.CharField()
    credential = serializers.CharField(
        help_text="shown this once: the agent sends it as 'Authorization: Worker <credential>'"
    )
