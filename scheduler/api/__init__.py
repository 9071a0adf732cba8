"""The REST API under /api/v1/: serializers, permissions, views and URLs (see docs/api.md)."""
