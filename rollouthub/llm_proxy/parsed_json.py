"""One JSON parse per body: the LLM proxy's layers hand each other the objects they parsed.

A layer that parsed a request or response body keeps ``(body, object)`` in the request's ASGI scope
(:func:`remember_json`); the next layer that needs the same body asks :func:`parsed_json`, which returns the kept
object when the bytes it was given are the bytes that were parsed, and otherwise parses them (a middleware in between
that rewrote the body gets a parse of what it wrote). Each kept object is handed out once.
"""

from __future__ import annotations

import json
from typing import Any, Dict, MutableMapping, Tuple

__all__ = ["REQUEST_BODY", "RESPONSE_BODY", "remember_json", "parsed_json"]

SCOPE_KEY = "rollouthub.llm_proxy.parsed_json"
"""The ASGI scope entry holding the kept objects (a dict shared by the scope copies the middlewares make)."""

REQUEST_BODY = "request"
"""Kind of the request body (kept by the stream conversion middleware, read by the engine)."""

RESPONSE_BODY = "response"
"""Kind of the response body (kept by the engine, read by the stream conversion middleware)."""


def _kept(scope: MutableMapping[str, Any]) -> Dict[str, Tuple[bytes, Any]]:
    kept = scope.get(SCOPE_KEY)
    if not isinstance(kept, dict):
        kept = scope[SCOPE_KEY] = {}
    return kept


def remember_json(scope: MutableMapping[str, Any], kind: str, body: bytes, parsed: Any) -> None:
    """Keep ``parsed``, the JSON object parsed from (or serialised as) ``body``, for the next layer of this request.
    Call it before copying the scope for an inner app, so that the copies share what is kept."""
    _kept(scope)[kind] = (body, parsed)


def parsed_json(scope: MutableMapping[str, Any], kind: str, body: bytes) -> Any:
    """The JSON value of ``body``: the object kept for ``kind`` when it was parsed from these very bytes, else
    ``json.loads(body)`` (which raises ``ValueError`` on invalid JSON)."""
    kept = _kept(scope).pop(kind, None)
    if kept is not None and kept[0] == body:
        return kept[1]
    return json.loads(body)
