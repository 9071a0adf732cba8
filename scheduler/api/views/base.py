"""What every API view shares: the schema, pagination, the base view, small parsers of the path and
the query string, and the JSON 404 for unmatched paths."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from scheduler.api import serializers as s
from scheduler.api.parsers import JSONParser
from scheduler.api.permissions import IsResearcher
from scheduler.core.bands import Band
from scheduler.foundation.errors import InvalidArgument, NotFound
from scheduler.jobs.request import normalize_job_id

# Error statuses most operations can answer; views narrow or widen this.
COMMON_ERRORS = ("400", "401", "403", "404")


# Every operation that takes a body can also answer these: a body over DATA_UPLOAD_MAX_MEMORY_SIZE
# (413) and a body that is not JSON (415).
BODY_ERRORS = ("413", "415")


class IrisSchema(AutoSchema):
    """Adds the JSON error responses each view declares (``error_statuses``) to its operations,
    and those of a request body to every operation that takes one."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        statuses = list(getattr(self.view, "error_statuses", COMMON_ERRORS))
        if self.method in ("POST", "PUT", "PATCH"):
            statuses += [code for code in BODY_ERRORS if code not in statuses]
        for code in statuses:
            if code not in responses:
                responses[code] = self._get_response_for_code(s.ErrorSerializer, code, direction=direction)
        return responses


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


PAGE_PARAMETERS = [
    OpenApiParameter("page", int, description="1-based page number"),
    OpenApiParameter("page_size", int, description=f"items per page (default {Pagination.page_size}, at most 500)"),
]


CURSOR_PARAMETER = OpenApiParameter(
    "cursor", str, description="where the page starts: the opaque cursor of a next or previous link"
)


def positive_query_int(params, name: str, *, default: int) -> int:
    """A query parameter that must be a whole number of at least 1 (INVALID_ARGUMENT otherwise)."""
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"expected a whole number, got {raw!r}", field=name) from None
    if value < 1:
        raise InvalidArgument("must be at least 1", field=name)
    return value


def paginated(item: type[serializers.Serializer], name: str, **extra_fields) -> serializers.Serializer:
    """The ``{count, next, previous, results}`` envelope around ``item`` as a named schema component."""
    return inline_serializer(
        name=name,
        fields={
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
            **extra_fields,
        },
    )


def path_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.PATH, description=description)


JOB_ID = path_parameter("job_id", "job id without the leading slash, e.g. alice/train or alice/train/eval")


class IrisView(APIView):
    """Base of every API view: JSON bodies only, signed-in users, errors declared for the schema."""

    parser_classes = [JSONParser]
    permission_classes = [IsResearcher]
    schema = IrisSchema()
    error_statuses = COMMON_ERRORS

    def filters(self, serializer_class: type[serializers.Serializer]) -> dict:
        serializer = serializer_class(data=self.request.query_params)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def body(self) -> dict:
        data = self.request.data
        if not isinstance(data, dict):
            raise InvalidArgument("expected a JSON object as the request body")
        return data

    def paginate(self, items, serializer_class, **extra):
        paginator = Pagination()
        page = paginator.paginate_queryset(items, self.request, view=self)
        response = paginator.get_paginated_response(serializer_class(page, many=True).data)
        response.data.update(extra)
        return response


def band_or_none(value: str | None) -> Band | None:
    return Band.parse(value) if value else None


def job_name_from_path(job_id: str) -> str:
    """A job id from the URL; anything that cannot be a job id simply names no job."""
    try:
        return normalize_job_id(job_id, "job")
    except InvalidArgument:
        raise NotFound(f"job {job_id!r} does not exist", field="job") from None


class NotFoundView(IrisView):
    """Any /api/v1/ path no route matches: a JSON 404 for every method (and no schema entry)."""

    permission_classes = [AllowAny]
    authentication_classes = []
    schema = None

    def initial(self, request, *args, **kwargs):
        raise NotFound(f"no API endpoint at {request.path}")
