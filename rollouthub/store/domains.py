"""Input domains of the store API: what every backend can hold, checked once at the edge (no I/O here).

The in-memory store holds any Python value, SQLite stores 64-bit integers and UTF-8 text, PostgreSQL rejects NUL
characters in ``text`` and ``jsonb`` and binds ``LIMIT``/``OFFSET`` as 32-bit integers. So that a request is answered
the same way whatever the backend, the server rejects -- before any store call -- every value outside the
intersection, with **400** and ``{"detail": "<field>: <reason>", "error_type": "InputDomainError", "field": ...}``:

* text (every string and every object key, at any depth): no NUL character (``\\u0000``) and no lone UTF-16
  surrogate (``\\ud800``-``\\udfff`` without its pair) -- neither is Unicode text, and PostgreSQL cannot store them;
* integers: signed 64-bit (:data:`INT64_MIN` .. :data:`INT64_MAX`);
* numbers: finite (``NaN``/``Infinity`` are not JSON; PostgreSQL's ``jsonb`` refuses them);
* nesting: at most :data:`MAX_JSON_DEPTH` levels of objects/arrays, counted from the request body's top level;
* pagination: ``limit`` is ``-1`` (everything) or ``1`` .. :data:`MAX_PAGE_SIZE`, ``offset`` is ``0`` ..
  :data:`MAX_OFFSET` (see ``server_routes.validate_pagination``);
* span sequence ids: at most :data:`MAX_SEQUENCE_ID` (enforced by the business logic, for every caller), so that the
  per-rollout counter can never run past the signed 64-bit range.

:class:`InputDomainError` deliberately is **not** a ``ValueError``: raised inside a pydantic validator it is not
turned into a ``ValidationError`` (a 422) but propagates to the server's error mapping (a 400), so the request models
themselves carry the checks (``model_validator``) and every path that validates them -- FastAPI routes, the front door,
the OTLP decoder, a client building a request -- rejects the same values with the same message.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Set, Tuple

from pydantic import BaseModel

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "MAX_JSON_DEPTH",
    "MAX_PAGE_SIZE",
    "MAX_OFFSET",
    "MAX_SEQUENCE_ID",
    "InputDomainError",
    "text_problem",
    "check_text",
    "find_problem",
    "check_value",
]

INT64_MIN = -(2**63)
"""Smallest integer accepted anywhere in a request."""

INT64_MAX = 2**63 - 1
"""Largest integer accepted anywhere in a request."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects/arrays in a request body (the body's top-level object is level 1)."""

MAX_PAGE_SIZE = 10_000
"""Largest ``limit`` of a search or of a dequeue (``-1``, everything, stays allowed on searches)."""

MAX_OFFSET = 2**31 - 1
"""Largest ``offset`` of a search (PostgreSQL binds ``OFFSET`` as a 32-bit integer)."""

MAX_SEQUENCE_ID = 2**53 - 1
"""Largest span sequence id (the largest integer JavaScript represents exactly; the per-rollout counter starting
there would need 2^62 allocations to leave the signed 64-bit range)."""


class InputDomainError(Exception):
    """A request value outside what every backend can hold (answered with 400).

    Attributes:
        field: where the value is, e.g. ``rollouts[0].input.text`` or ``rollout_id``.
        reason: what is wrong with it, e.g. ``contains a NUL character (\\u0000)``.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


_NUL = "\x00"


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text_problem(text: str) -> Optional[str]:
    """Why ``text`` cannot be stored by every backend, or ``None`` when it can."""
    if _NUL in text:
        return "contains a NUL character (\\u0000), which is not allowed in text"
    if not text.isascii() and _has_surrogate(text):
        return "contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid Unicode text"
    return None


def check_text(text: Optional[str], field: str) -> Optional[str]:
    """Return ``text`` unchanged, or raise :class:`InputDomainError` naming ``field``."""
    if text is not None and (_NUL in text or not text.isascii()):
        problem = text_problem(text)
        if problem is not None:
            raise InputDomainError(field, problem)
    return text


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key_label(key: Any) -> str:
    return key if isinstance(key, str) and key.isidentifier() else repr(key)


def _number_problem(value: Any) -> Optional[str]:
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        if not INT64_MIN <= value <= INT64_MAX:
            return "is an integer outside the signed 64-bit range"
        return None
    if not math.isfinite(value):
        return "is not a finite number (NaN and Infinity are not allowed)"
    return None


_SCALARS = (bool, type(None))
_isfinite = math.isfinite
_TOO_DEEP = f"exceeds the maximum nesting depth of {MAX_JSON_DEPTH} levels of objects and arrays"


_MODEL_TYPES: Set[type] = set()
"""Pydantic model classes met so far (``isinstance`` against ``BaseModel`` goes through ``ABCMeta``: slow)."""


def _is_model_type(kind: type) -> bool:
    if kind in _MODEL_TYPES:
        return True
    if issubclass(kind, BaseModel):
        _MODEL_TYPES.add(kind)
        return True
    return False


def _bad_text(text: str) -> bool:
    return _NUL in text or _has_surrogate(text)


def _suspect(value: Any, depth: int) -> bool:
    """Fast pass of :func:`find_problem`: ``False`` guarantees that ``value`` lies in the domains; ``True`` means it
    may not (then :func:`_locate` finds out, and names the field). No paths are built: this runs on every request."""
    stack: List[Tuple[Any, int]] = [((value,), depth - 1)]  # wrapped: the loop checks the items of containers
    pop, push = stack.pop, stack.append
    models = _MODEL_TYPES
    while stack:
        node, level = pop()
        if level > MAX_JSON_DEPTH:
            return True
        kind = type(node)
        values: Any
        if kind is dict:
            try:  # all keys are text (JSON objects): check them at once
                keys = "".join(node)
            except TypeError:
                return True  # a non-text key: let the slow pass decide
            if (_NUL in keys or not keys.isascii()) and _bad_text(keys):
                return True
            values = node.values()
            # The common case of text values (span attributes): one check for all of them. Tried only when the first
            # and last values are text: a failed join (mixed values, e.g. heartbeat stats) costs more than it saves.
            if node and type(next(iter(values))) is str and type(next(reversed(values))) is str:
                try:
                    texts = "".join(values)
                except TypeError:
                    pass
                else:
                    if (_NUL in texts or not texts.isascii()) and _bad_text(texts):
                        return True
                    continue
        elif kind is list or kind is tuple:
            values = node
        elif kind in models or _is_model_type(kind):
            values = node.__dict__.values()
            extra = node.model_extra
            if extra:
                push((extra, level))  # extra fields sit at the level of the declared ones
        else:
            return True  # a container subclass: let the slow pass decide
        child = level + 1
        for item in values:
            kind = type(item)
            if kind is str:
                if (_NUL in item or not item.isascii()) and _bad_text(item):
                    return True
            elif kind is int:
                if not INT64_MIN <= item <= INT64_MAX:
                    return True
            elif kind is float:
                if not _isfinite(item):
                    return True
            elif item is None or kind is bool:
                continue
            elif kind is dict or kind is list or kind is tuple or kind in models or _is_model_type(kind):
                push((item, child))
            else:
                return True  # a str/int/float/dict subclass or another type: let the slow pass decide
    return False


def find_problem(value: Any, path: str = "", depth: int = 1) -> Optional[Tuple[str, str]]:
    """The first value outside the domains in ``value`` as ``(field path, reason)``, or ``None``.

    Walks pydantic models (declared fields and extra fields), mappings (keys and values) and lists/tuples without
    recursion. ``depth`` is the nesting level of ``value`` when it is an object or array (a request body is level 1,
    an object inside it level 2, ...); a level above :data:`MAX_JSON_DEPTH` is a problem. A fast pass without paths
    (a few microseconds per request) clears the common case; only a suspicious value is walked again to name the field.
    """
    if not _suspect(value, depth):
        return None
    return _locate(value, path, depth)


def _locate(value: Any, path: str, depth: int) -> Optional[Tuple[str, str]]:
    """The slow pass of :func:`find_problem`: the same walk, building the path of every value."""
    stack: List[Tuple[Any, str, int]] = [(value, path, depth)]
    pop, push = stack.pop, stack.append
    while stack:
        item, where, level = pop()
        kind = type(item)
        if kind is str:
            if _NUL in item or not item.isascii():
                problem = text_problem(item)
                if problem is not None:
                    return where, problem
            continue
        if kind is int or kind is float:
            if kind is float and math.isfinite(item):
                continue
            if kind is int and INT64_MIN <= item <= INT64_MAX:
                continue
            problem = _number_problem(item)
            if problem is not None:
                return where, problem
            continue
        if item is None or kind in _SCALARS:
            continue
        if isinstance(item, BaseModel):
            children: Dict[str, Any] = item.__dict__
            extra = item.model_extra
            if extra:
                children = {**children, **extra}
        elif isinstance(item, dict):
            children = item
        elif isinstance(item, (list, tuple)):
            if level > MAX_JSON_DEPTH:
                return where, _TOO_DEEP
            for index in range(len(item) - 1, -1, -1):
                push((item[index], f"{where}[{index}]", level + 1))
            continue
        elif isinstance(item, str):  # str subclasses (e.g. enums)
            push((str(item), where, level))
            continue
        elif isinstance(item, (int, float)):
            problem = _number_problem(item)
            if problem is not None:
                return where, problem
            continue
        else:
            continue
        if level > MAX_JSON_DEPTH:
            return where, _TOO_DEEP
        for key, child in reversed(list(children.items())):
            if type(key) is str and (_NUL in key or not key.isascii()):
                problem = text_problem(key)
                if problem is not None:
                    return _join(where, repr(key)), f"(an object key) {problem}"
            push((child, _join(where, _key_label(key)), level + 1))
    return None


def check_value(value: Any, field: str = "", depth: int = 1) -> None:
    """Raise :class:`InputDomainError` for the first value of ``value`` outside the domains (see :func:`find_problem`)."""
    found = find_problem(value, field, depth)
    if found is not None:
        raise InputDomainError(*found)
