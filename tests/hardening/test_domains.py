"""The input domains (``rollouthub.store.domains``) and the bounded decompression of OTLP bodies, in process."""

from __future__ import annotations

import gzip
import math
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollouthub.store.client_server import EnqueueManyRolloutsRequest, QuerySpansRequest, UpdateWorkerRequest
from rollouthub.store.domains import (
    INT64_MAX,
    INT64_MIN,
    MAX_JSON_DEPTH,
    InputDomainError,
    _locate,
    _suspect,
    check_text,
    find_problem,
)
from rollouthub.store.server.otlp_decode import (
    INFLATE_SLICE_BYTES,
    OTLPPayloadError,
    OTLPPayloadTooLarge,
    OTLPUnsupportedEncoding,
    inflate,
    inflate_async,
)
from rollouthub.types import Span

from .live import legit_span

# -- JSON-like values, hostile ones included ----------------------------------------------------------------------------

_texts = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0xFFFF), max_size=6)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=INT64_MIN - 3, max_value=INT64_MAX + 3) | st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    _texts,
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_texts, children, max_size=4),
    max_leaves=25,
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=400, deadline=None, database=None)
@given(_values)
def test_the_fast_pass_never_clears_what_the_slow_pass_rejects(value: Any) -> None:
    located = _locate(value, "", 1)
    if located is not None:
        assert _suspect(value, 1), located
    assert find_problem(value) == located


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"a": "x\x00"}, "a", "NUL"),
        ({"a": ["ok", "\ud800"]}, "a[1]", "surrogate"),
        ({"k\x00": 1}, "'k\\x00'", "object key"),
        ({"n": INT64_MAX + 1}, "n", "64-bit"),
        ({"n": INT64_MIN - 1}, "n", "64-bit"),
        ({"f": math.nan}, "f", "finite"),
        ({"f": [math.inf]}, "f[0]", "finite"),
        ({"d": _nested(MAX_JSON_DEPTH)}, "d" + "[0]" * (MAX_JSON_DEPTH - 1), "nesting depth"),
    ],
)
def test_problems_name_the_field(value: Any, path: str, reason: str) -> None:
    found = find_problem(value)
    assert found is not None and found[0] == path and reason in found[1], found


def test_values_inside_the_domains_pass() -> None:
    assert find_problem({"a": ["é", "日本", "🙂", INT64_MAX, INT64_MIN, 1.5, None, True], "b": {"c": "x"}}) is None
    assert find_problem({"d": _nested(MAX_JSON_DEPTH - 1)}) is None  # the object is level 1, arrays 2..64
    assert check_text("plain", "f") == "plain" and check_text(None, "f") is None
    with pytest.raises(InputDomainError) as info:
        check_text("a\x00", "worker_id")
    assert info.value.field == "worker_id" and "NUL" in str(info.value)


def test_request_models_carry_the_checks_and_do_not_turn_them_into_422s() -> None:
    with pytest.raises(InputDomainError) as info:
        EnqueueManyRolloutsRequest.model_validate_json(b'{"rollouts": [{"input": {"q": "\\u0000"}}]}')
    assert info.value.field == "rollouts[0].input.q"
    with pytest.raises(InputDomainError, match="heartbeat_stats"):
        UpdateWorkerRequest.model_validate({"heartbeat_stats": {"t": float("nan")}})
    with pytest.raises(InputDomainError, match="name_contains"):
        QuerySpansRequest(rollout_id="r", name_contains="\ud800")
    span = Span.model_validate({**legit_span("r", "a"), "extra": {"x": "\x00"}})
    assert find_problem(span) == ("extra.x", find_problem({"x": "\x00"})[1])  # type: ignore[index]


# -- bounded inflate -----------------------------------------------------------------------------------------------------


def test_inflate_round_trips_and_concatenated_members() -> None:
    payload = bytes(range(256)) * 1000
    assert inflate(gzip.compress(payload), "gzip", 10**6) == payload
    assert inflate(gzip.compress(payload[:10]) + gzip.compress(payload[10:]), "GZIP", 10**6) == payload
    assert inflate(zlib.compress(payload), "deflate", 10**6) == payload
    assert inflate(payload, "identity", 10**6) == payload
    assert inflate(payload, None, 0) == payload
    assert inflate(b"", "gzip", 10) == b""


def test_inflate_stops_at_the_limit() -> None:
    body = gzip.compress(b"\x00" * (3 * INFLATE_SLICE_BYTES))
    assert len(inflate(body, "gzip", 3 * INFLATE_SLICE_BYTES)) == 3 * INFLATE_SLICE_BYTES  # exactly the limit: fine
    with pytest.raises(OTLPPayloadTooLarge, match="limit 3145727 bytes"):
        inflate(body, "gzip", 3 * INFLATE_SLICE_BYTES - 1)
    with pytest.raises(OTLPPayloadTooLarge):
        inflate(b"x" * 11, None, 10)


@pytest.mark.parametrize(
    ("body", "encoding", "error", "message"),
    [
        (b"not gzip", "gzip", OTLPPayloadError, "Unable to decompress gzip"),
        (gzip.compress(b"abc" * 100)[:-10], "gzip", OTLPPayloadError, "truncated"),
        (gzip.compress(b"abc") + b"junk", "gzip", OTLPPayloadError, "Unable to decompress"),
        (b"abc", "br", OTLPUnsupportedEncoding, "Unsupported Content-Encoding 'br'"),
        (b"abc", "gzip, gzip", OTLPUnsupportedEncoding, "gzip, gzip"),
    ],
)
def test_inflate_errors(body: bytes, encoding: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        inflate(body, encoding, 10**6)


async def test_inflate_async_matches_inflate() -> None:
    payload = b"span" * (INFLATE_SLICE_BYTES // 2)
    body = gzip.compress(payload)
    assert await inflate_async(body, "gzip", 10**7) == payload
    assert await inflate_async(gzip.compress(b"small"), "gzip", 100) == b"small"
    with pytest.raises(OTLPPayloadTooLarge):
        await inflate_async(body, "gzip", INFLATE_SLICE_BYTES)


@pytest.mark.parametrize(
    "size", [INFLATE_SLICE_BYTES - 1, INFLATE_SLICE_BYTES, INFLATE_SLICE_BYTES + 1, 3 * INFLATE_SLICE_BYTES]
)
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_inflate_at_slice_boundaries(size: int, encoding: str) -> None:
    payload = b"\x00" * size  # long matches: zlib may hold output back when a slice is full
    body = gzip.compress(payload) if encoding == "gzip" else zlib.compress(payload)
    assert inflate(body, encoding, size) == payload
    assert inflate(body, encoding, 0) == payload
