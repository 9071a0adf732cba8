"""The API's JSON parser: DRF's, with the nesting of a document bounded.

Python's ``json`` recurses once per level, so a body of ``[[[[...]]]]`` some thousand levels deep
raised ``RecursionError`` (a 500) in the parser or in whatever walked the result next. No request
of this API nests deeper than a handful of levels; :data:`MAX_JSON_DEPTH` leaves room to spare
and anything deeper is a 400 with the usual JSON error.
"""

from __future__ import annotations

import codecs
import json

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

# Levels of arrays and objects one request body may nest. The deepest real body (a job's
# constraints: object > list > object > list) has four.
MAX_JSON_DEPTH = 32


def json_depth_exceeds(data: object, limit: int) -> bool:
    """Whether ``data`` nests arrays/objects deeper than ``limit``; iterative, so never recurses."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class JSONParser(parsers.JSONParser):
    """``application/json`` bodies, at most :data:`MAX_JSON_DEPTH` levels deep."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            data = json.loads(text, parse_constant=self._refuse_constant)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        if json_depth_exceeds(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        return data

    @staticmethod
    def _refuse_constant(name: str):
        # NaN and Infinity are not JSON (DRF's strict mode refuses them too).
        raise ValueError(f"{name} is not valid JSON")
