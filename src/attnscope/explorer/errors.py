"""The explorer's errors: a request the stores cannot answer, each with the HTTP status the
server answers it with."""

from __future__ import annotations


class ExplorerError(Exception):
    """A request the stores cannot answer, with the HTTP status it is answered with."""

    status = 500


class BadRequest(ExplorerError):
    """A malformed request: a missing or invalid parameter, a value out of its range (HTTP 400)."""

    status = 400


class NotFound(ExplorerError):
    """An unknown store, prompt, array or page (HTTP 404)."""

    status = 404


class StoreError(ExplorerError):
    """A store that cannot give the data it promises: a missing, truncated or corrupt chunk, or a
    store removed while serving (HTTP 500)."""
