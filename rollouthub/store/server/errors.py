"""How the store server answers failures: the exception → status table, FastAPI's 422 body, metric path labels."""

from __future__ import annotations

import json
import re
import traceback
from typing import Any, Dict, Sequence

import pydantic
from fastapi.encoders import jsonable_encoder

from ..base import SpansEvictedError
from ..domains import InputDomainError
from ..errors import is_data_error, is_retryable_error

__all__ = ["error_payload", "template_http_path", "validation_error_body"]


def error_payload(exc: BaseException) -> tuple[int, Dict[str, Any]]:
    """Map an exception escaping a ``/v1/agl`` handler to a status code and JSON body (the table in docs/server.md).

    * :class:`~rollouthub.store.domains.InputDomainError` → 400 ``{"detail", "error_type", "field"}``;
    * ``pydantic.ValidationError`` → 400 with its text; ``ValueError``/``TypeError``/``OverflowError`` → 400 with the
      message (or the class name);
    * :class:`~rollouthub.store.base.SpansEvictedError` → 410 Gone;
    * a database "data exception" (SQLSTATE class 22, a value the database cannot hold) → 400;
    * a database that is unreachable, overloaded or kept conflicting (``errors.is_retryable_error``) → 503;
    * anything else → 500 with ``{"detail", "error_type", "traceback"}`` (the reference shape).
    """
    name = type(exc).__name__
    if isinstance(exc, InputDomainError):
        return 400, {"detail": str(exc), "error_type": name, "field": exc.field}
    if isinstance(exc, pydantic.ValidationError):
        return 400, {"detail": str(exc), "error_type": name}
    if isinstance(exc, (ValueError, TypeError, OverflowError)):
        return 400, {"detail": str(exc) or name, "error_type": name}
    if isinstance(exc, SpansEvictedError):
        return 410, {"detail": str(exc), "error_type": name}
    if is_data_error(exc):
        return 400, {"detail": f"The database rejected a value of the request: {exc}", "error_type": name}
    if is_retryable_error(exc):
        return 503, {"detail": f"The store is temporarily unavailable, retry later: {exc}", "error_type": name}
    return 500, {
        "detail": "Internal server error",
        "error_type": name,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def validation_error_body(errors: Sequence[Any]) -> bytes:
    """The JSON body of a 422 (FastAPI's ``{"detail": [{"type", "loc", "msg", "input", ...}]}``).

    The errors echo the offending input; when that cannot be rendered as JSON -- ``NaN``/``Infinity`` values, or
    nesting too deep to encode -- it is left out (``type``, ``loc`` and ``msg`` still name the field) instead of
    failing the response."""
    try:
        return json.dumps({"detail": jsonable_encoder(errors)}, allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError):
        slim = [{key: error[key] for key in ("type", "loc", "msg") if key in error} for error in errors]
        return json.dumps({"detail": slim}, default=str).encode()


_RE_ATTEMPT = re.compile(r"/attempts/[^/]+$")
_RE_ROLLOUT = re.compile(r"/rollouts/[^/]+")
_RE_RESOURCES = re.compile(r"/resources/[^/]+$")
_RE_WORKERS = re.compile(r"/workers/[^/]+$")


def template_http_path(path: str) -> str:
    """Replace ids in a request path by placeholders so that metric label cardinality stays bounded.

    Requests of a declared route are labelled with its path template; this covers the others."""
    if "/rollouts/" in path:
        if path.endswith("/attempts/latest"):
            return _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path, count=1)
        if path.endswith("/attempts/search"):
            return _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path, count=1)
    if path.endswith("/resources/latest") or path.endswith("/search") or "enqueue" in path or "dequeue" in path:
        return path
    path = _RE_ATTEMPT.sub("/attempts/{attempt_id}", path)
    path = _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path)
    path = _RE_RESOURCES.sub("/resources/{resources_id}", path)
    return _RE_WORKERS.sub("/workers/{worker_id}", path)
