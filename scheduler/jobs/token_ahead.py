"""A token check that rides with a submission's lock and rule reads (issue 26, ``submit37``): the
use case's side of it (:func:`scheduler.jobs.submit.submit_job`'s ``token_check``); the API's
side is ``scheduler.api.authentication.TokenCheckAhead``."""

from __future__ import annotations

from typing import Any, Protocol


class Unverified(Exception):
    """The token check sent with a submission's reads (``submit_job``'s ``token_check``) did not
    pass, or a rule failed before it was made: nothing was written, and the caller answers the
    request the ordinary way (its own token check first)."""


class TokenCheck(Protocol):
    """A token check that rides with a submission's lock and rule reads (one round trip fewer):
    ``actor`` is the user guessed until ``verify`` (given the rows of ``statement``) returns the
    user the token authenticates, or raises :class:`Unverified`; ``verified`` then says so."""

    actor: Any
    verified: bool

    @property
    def statement(self) -> tuple[str, list]: ...

    def verify(self, rows: list[tuple]) -> Any: ...
