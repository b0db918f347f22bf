"""ASGI middlewares of the LLM proxy.

* :class:`RolloutAttemptMiddleware` (``"rollout_attempt"``) — strips the ``/rollout/{rid}/attempt/{aid}`` prefix,
  allocates the request's span sequence id from the store **at request start** and adds the headers
  ``x-rollout-id``, ``x-attempt-id``, ``x-sequence-id``.
* :class:`StreamConversionMiddleware` (``"stream_conversion"``) — serves ``stream: true`` chat completions (and
  Anthropic ``/messages``) from a non-streaming upstream call, replayed as server-sent events.
* :class:`MessageInspectionMiddleware` (``"message_inspection"``) — logs requests and responses (debugging only).

They are plain ASGI middlewares: ``app.add_middleware(cls)`` works on any Starlette/FastAPI app. Without an explicit
``llm_proxy`` they read the store of the active proxy (:func:`~rollouthub.llm_proxy.get_active_llm_proxy`).
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Sequence, Tuple, Union

from .parsed_json import REQUEST_BODY, RESPONSE_BODY, parsed_json, remember_json
from .replay import anthropic_stream_events, openai_stream_events

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

    from .proxy import LLMProxy

__all__ = [
    "RolloutAttemptMiddleware",
    "StreamConversionMiddleware",
    "MessageInspectionMiddleware",
    "MIDDLEWARE_ALIASES",
    "ROLLOUT_ID_HEADER",
    "ATTEMPT_ID_HEADER",
    "SEQUENCE_ID_HEADER",
    "resolve_middlewares",
]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ROLLOUT_ID_HEADER = "x-rollout-id"
ATTEMPT_ID_HEADER = "x-attempt-id"
SEQUENCE_ID_HEADER = "x-sequence-id"
_OWN_HEADERS = {ROLLOUT_ID_HEADER.encode(), ATTEMPT_ID_HEADER.encode(), SEQUENCE_ID_HEADER.encode()}

_PREFIX = re.compile(r"^/rollout/([^/]+)/attempt/([^/]+)(/.*)?$")
_RAW_PREFIX = re.compile(rb"^/rollout/[^/]+/attempt/[^/]+(/.*)?$")

_LOG_BODY_LIMIT = 4000


def _proxy_store(llm_proxy: Optional[LLMProxy]) -> Optional[LightningStore]:
    """The store of ``llm_proxy``, else of the active proxy (``None`` when there is none)."""
    if llm_proxy is None:
        from .proxy import _active_llm_proxy

        llm_proxy = _active_llm_proxy()
    return llm_proxy.get_store() if llm_proxy is not None else None


async def _read_body(receive: Receive) -> Tuple[bytes, bool]:
    """Read the whole request body; the flag is False when the client disconnected first."""
    chunks: List[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay_receive(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` once, then defers to the original (to observe disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_json_error(send: Send, status: int, message: str, error_type: str) -> None:
    body = json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": str(status)}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RolloutAttemptMiddleware:
    """Route ``/rollout/{rollout_id}/attempt/{attempt_id}/...`` requests and allocate their sequence id.

    The ASGI path (and raw path) is rewritten to the remainder (or ``/``); ``sequence_id =
    await store.get_next_span_sequence_id(rollout_id, attempt_id)`` is obtained before the request proceeds, and
    the headers ``x-rollout-id``, ``x-attempt-id`` and ``x-sequence-id`` (decimal) replace any the client sent.
    Without a store: a warning and no headers. If the store fails, the request is answered with HTTP 503.
    """

    def __init__(self, app: ASGIApp, llm_proxy: Optional[LLMProxy] = None) -> None:
        """Wrap ``app``; ``llm_proxy`` provides the store (default: the active proxy)."""
        self.app = app
        self.llm_proxy = llm_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _PREFIX.match(scope.get("path", ""))
        if match is None:
            await self.app(scope, receive, send)
            return
        rollout_id, attempt_id, rest = match.group(1), match.group(2), match.group(3) or "/"
        scope = dict(scope)
        scope["path"] = rest
        raw_match = _RAW_PREFIX.match(scope.get("raw_path") or b"")
        scope["raw_path"] = (raw_match.group(1) or b"/") if raw_match else urllib.parse.quote(rest).encode()
        headers = [(key, value) for key, value in scope.get("headers", []) if key.lower() not in _OWN_HEADERS]
        store = _proxy_store(self.llm_proxy)
        if store is None:
            logger.warning("No store is available; request to %s is not attributed to rollout %s.", rest, rollout_id)
        else:
            try:
                sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
            except Exception as exc:
                logger.exception("Could not allocate a span sequence id for %s/%s.", rollout_id, attempt_id)
                await _send_json_error(send, 503, f"The LLM proxy could not reach the store: {exc}", "store_error")
                return
            headers.extend(
                [
                    (ROLLOUT_ID_HEADER.encode(), rollout_id.encode()),
                    (ATTEMPT_ID_HEADER.encode(), attempt_id.encode()),
                    (SEQUENCE_ID_HEADER.encode(), str(int(sequence_id)).encode()),
                ]
            )
        scope["headers"] = headers
        await self.app(scope, receive, send)


class StreamConversionMiddleware:
    """Serve ``stream: true`` requests from a non-streaming upstream call, replayed as server-sent events.

    Applies to ``POST`` requests whose path ends with ``/chat/completions`` (OpenAI) or ``/messages`` (Anthropic)
    and whose JSON body has ``stream: true``: the request is forwarded with ``stream: false`` (``stream_options``
    removed; ``include_usage`` is honoured by a final usage chunk), ``Accept: application/json`` and a recomputed
    ``Content-Length``. A 2xx JSON answer is replayed as ``text/event-stream``; non-2xx answers, non-JSON bodies
    and conversion errors pass the buffered response through unchanged.
    """

    def __init__(self, app: ASGIApp, llm_proxy: Optional[LLMProxy] = None) -> None:
        """Wrap ``app`` (``llm_proxy`` is accepted for symmetry and unused)."""
        self.app = app
        self.llm_proxy = llm_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        path = scope.get("path", "")
        flavour = None
        if scope["type"] == "http" and scope.get("method") == "POST":
            if path.endswith("/chat/completions"):
                flavour = "openai"
            elif path.endswith("/messages"):
                flavour = "anthropic"
        if flavour is None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        try:
            data = json.loads(body) if complete else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("stream") is not True:
            if isinstance(data, dict):
                remember_json(scope, REQUEST_BODY, body, data)  # the engine does not parse it again
            await self.app(scope, _replay_receive(body, receive), send)
            return
        stream_options = data.pop("stream_options", None)
        include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
        data["stream"] = False
        new_body = json.dumps(data).encode()
        remember_json(scope, REQUEST_BODY, new_body, data)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in (b"content-length", b"accept")]
        headers += [(b"content-length", str(len(new_body)).encode()), (b"accept", b"application/json")]
        inner_scope = dict(scope)
        inner_scope["headers"] = headers

        start: Dict[str, Any] = {}
        chunks: List[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(inner_scope, _replay_receive(new_body, receive), capture)
        status = int(start.get("status", 500))
        buffered = b"".join(chunks)
        if 200 <= status < 300:
            try:
                parsed = parsed_json(inner_scope, RESPONSE_BODY, buffered)
                if not isinstance(parsed, dict):
                    raise ValueError("not a JSON object")
                events = (
                    openai_stream_events(parsed, include_usage=include_usage)
                    if flavour == "openai"
                    else anthropic_stream_events(parsed)
                )
            except Exception as exc:
                logger.warning(
                    "Could not convert the response of %s into a stream (%s); returning it as is.", path, exc
                )
            else:
                await self._send_events(send, events)
                return
        await send({"type": "http.response.start", "status": status, "headers": _with_length(start, len(buffered))})
        await send({"type": "http.response.body", "body": buffered})

    @staticmethod
    async def _send_events(send: Send, events: Sequence[str]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"connection", b"keep-alive"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        for event in events:
            await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _with_length(start: Dict[str, Any], length: int) -> List[Tuple[bytes, bytes]]:
    headers = [
        (k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"transfer-encoding")
    ]
    return headers + [(b"content-length", str(length).encode())]


class MessageInspectionMiddleware:
    """Log every request (method, path, headers without credentials, body) and its response (status, latency, body).

    For debugging only: bodies are logged at INFO level, truncated to 4000 characters.
    """

    def __init__(self, app: ASGIApp, llm_proxy: Optional[LLMProxy] = None) -> None:
        """Wrap ``app``."""
        self.app = app
        self.llm_proxy = llm_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_chunks: List[bytes] = []
        response_chunks: List[bytes] = []
        status: List[int] = []

        async def logged_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                request_chunks.append(message.get("body", b""))
            return message

        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            elif message["type"] == "http.response.body":
                response_chunks.append(message.get("body", b""))
            await send(message)

        headers = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope.get("headers", [])
            if key.lower() not in (b"authorization", b"x-api-key", b"api-key")
        }
        try:
            await self.app(scope, logged_receive, logged_send)
        finally:
            logger.info(
                "LLM proxy %s %s headers=%s body=%s -> status=%s in %.3fs body=%s",
                scope.get("method"),
                scope.get("path"),
                headers,
                b"".join(request_chunks)[:_LOG_BODY_LIMIT].decode("utf-8", "replace"),
                status[0] if status else None,
                time.perf_counter() - started,
                b"".join(response_chunks)[:_LOG_BODY_LIMIT].decode("utf-8", "replace"),
            )


MIDDLEWARE_ALIASES: Dict[str, type] = {
    "rollout_attempt": RolloutAttemptMiddleware,
    "stream_conversion": StreamConversionMiddleware,
    "message_inspection": MessageInspectionMiddleware,
}
"""Alias → middleware class."""

DEFAULT_MIDDLEWARES: List[str] = ["rollout_attempt", "stream_conversion"]

_OWN_MIDDLEWARES = (RolloutAttemptMiddleware, StreamConversionMiddleware, MessageInspectionMiddleware)


def resolve_middlewares(middlewares: Optional[Sequence[Union[str, type]]]) -> List[type]:
    """Resolve aliases to classes (``ValueError`` for unknown aliases or non-class entries)."""
    resolved: List[type] = []
    for spec in DEFAULT_MIDDLEWARES if middlewares is None else middlewares:
        if isinstance(spec, str):
            if spec not in MIDDLEWARE_ALIASES:
                raise ValueError(
                    f"Unknown LLM proxy middleware alias {spec!r}. Valid aliases: "
                    f"{', '.join(sorted(MIDDLEWARE_ALIASES))}."
                )
            cls = MIDDLEWARE_ALIASES[spec]
        elif isinstance(spec, type):
            cls = spec
        else:
            raise ValueError(f"Middlewares must be aliases or ASGI middleware classes, got {spec!r}.")
        if cls not in resolved:
            resolved.append(cls)
    return resolved


def is_own_middleware(cls: type) -> bool:
    """Whether ``cls`` is one of the proxy's middlewares (they accept an ``llm_proxy`` keyword)."""
    return issubclass(cls, _OWN_MIDDLEWARES)
