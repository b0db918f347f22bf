"""The building blocks of the adversarial table (see ``cases.py``): :class:`Case` and small body builders."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple, Union

NUL = "\x00"
SURROGATE = "\ud800"
BODY_LIMIT = 256 * 1024
"""``max_body_bytes`` of the servers the table runs against (small, so that bombs stay cheap)."""

Check = Callable[[Any], Optional[str]]
"""Checks a successful JSON answer: ``None`` when fine, else what is wrong."""


@dataclass(frozen=True)
class Case:
    """One request of the table and the answer it must get."""

    name: str
    method: str
    path: str
    body: Optional[bytes] = None
    status: Union[int, Tuple[int, ...]] = 400
    names: Optional[str] = None
    """Text the response body must contain (the field, parameter or limit the error is about)."""
    headers: Tuple[Tuple[str, str], ...] = (("Content-Type", "application/json"),)
    query: str = ""
    must_not_contain: Tuple[str, ...] = ()
    check: Optional[Check] = None
    raw: bool = False
    """Send the request line and headers byte for byte over a socket (paths a client would normalise)."""

    def statuses(self) -> Tuple[int, ...]:
        """The acceptable status codes."""
        return self.status if isinstance(self.status, tuple) else (self.status,)


def j(value: Any) -> bytes:
    """JSON text of ``value``; NUL and lone surrogates come out as ``\\u0000`` / ``\\ud800`` escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` nested arrays around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_json(depth: int) -> bytes:
    """``depth`` nested arrays as JSON text (built as text: too deep for ``json.dumps``)."""
    return b"[" * depth + b"1" + b"]" * depth


def total_is(expected: int) -> Check:
    """A check that a paginated answer has ``total == expected``."""

    def check(payload: Any) -> Optional[str]:
        total = payload.get("total") if isinstance(payload, dict) else None
        return None if total == expected else f"expected total {expected}, got {total!r}"

    return check
