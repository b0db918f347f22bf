"""The adversarial request table: every hostile or edge-case request the suite sends, declared as data.

A :class:`Case` is one HTTP request (method, path with ``{rollout_id}``-style placeholders for the seeded ids, raw
query string, raw body, headers) and what the server must answer: the status code, a text the response body must
contain (usually the name of the offending field), and optionally texts it must not contain or a check of the
successful answer. :func:`build_cases` returns the whole table for one seeded server; it is the same for every
backend (the point: memory, SQLite and PostgreSQL answer identically).

Classes covered: malformed JSON, wrong types, unknown enums, NUL characters and lone surrogates in every kind of
string (bodies, object keys, query and path parameters, OTLP protobuf and OTLP JSON), integers outside the signed
64-bit range, non-finite numbers, nesting depth, huge ``limit``/``offset``, sequence-id overflow, compressed bombs and
unsupported encodings, bad protobuf and OTLP JSON, odd ids, injection-looking strings in filters and sort keys, path
traversal on the dashboard route, unknown routes and methods, malformed headers.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

from .case import BODY_LIMIT, NUL, SURROGATE, Case, j, nested, nested_json, total_is
from .table_otlp import gzip_bomb, otlp_cases, otlp_json, otlp_request
from .table_text import text_cases
from .table_values import (
    depth_cases,
    filter_injection_cases,
    malformed_cases,
    number_cases,
    raw_cases,
    route_cases,
)

__all__ = [
    "BODY_LIMIT",
    "NUL",
    "SURROGATE",
    "Case",
    "build_cases",
    "describe",
    "gzip_bomb",
    "j",
    "nested",
    "nested_json",
    "otlp_json",
    "otlp_request",
    "total_is",
]


def build_cases(ids: Dict[str, str]) -> List[Case]:
    """The whole table for a server seeded by :func:`tests.hardening.live.seed` (``ids`` are its ids)."""
    cases = (
        text_cases(ids)
        + number_cases(ids)
        + depth_cases(ids)
        + malformed_cases(ids)
        + filter_injection_cases(ids)
        + otlp_cases(ids)
        + route_cases()
        + raw_cases()
    )
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f"duplicate case names: {sorted(duplicates)}"
    return cases


def describe(cases: Sequence[Case]) -> Dict[str, int]:
    """How many cases of each status code the table expects (for the report)."""
    counts: Dict[str, int] = {}
    for case in cases:
        key = "/".join(str(s) for s in case.statuses())
        counts[key] = counts.get(key, 0) + 1
    return counts
