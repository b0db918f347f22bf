"""A deterministic, OpenAI-compatible mock LLM server for tests and offline examples.

Usage::

    with MockOpenAIServer(reply={"What is 2+2?": "4"}) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="dummy")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is 2+2?"}])

The server runs uvicorn in a daemon thread on a free ``127.0.0.1`` port. Replies are a deterministic function of the
request: a callable, a mapping (looked up by last user message, then by model, then ``"*"``), a constant string, or
by default ``"echo: <last user message>"``. With ``"return_token_ids": true`` in the request body, responses carry
``prompt_token_ids`` and ``choices[0].token_ids`` (the UTF-8 byte values of the prompt text and of the answer; text
completions put both on the choice, as vLLM does). A reply dict with ``"status_code": <4xx/5xx>`` makes the server
answer with that status and an OpenAI-style error whose message is the reply's ``content``.

``MockOpenAIServer(tokenization="chat_template")`` tokenizes chat completions like a model with a chat template
instead (opt-in; the default stays as above): the prompt is rendered with :func:`render_chat_template` --
``<|role|>content<|end|>`` per message (an assistant's tool calls as ``<|tool_call|>name(arguments)`` after its
content) and ``<|assistant|>`` as the generation prompt -- and the answer is ``content`` (+ tool calls) ``<|end|>``;
token ids are the UTF-8 bytes of those texts. A conversation re-sent with the answer appended therefore begins with
the previous prompt's and answer's ids (the prefix property of multi-turn trajectories). With ``"logprobs": true``
such a chat completion also carries ``choices[0].logprobs.content`` with one deterministic log-probability per answer
token (:func:`mock_logprob`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union

from fastapi import Request

__all__ = [
    "MockOpenAIServer",
    "MockReply",
    "ReplySpec",
    "Tokenization",
    "prompt_text",
    "last_user_message",
    "text_token_ids",
    "render_chat_template",
    "render_answer",
    "mock_logprob",
]

MockReply = Union[str, Dict[str, Any]]
"""A reply: the assistant text, or a dict with ``content`` and optionally ``finish_reason``, ``tool_calls``."""

ReplySpec = Union[None, str, Mapping[str, MockReply], Callable[[Dict[str, Any]], MockReply]]
"""How the server answers: see :class:`MockOpenAIServer`."""

Tokenization = Literal["text", "chat_template"]
"""How chat completions are tokenized: ``"text"`` (default) the UTF-8 bytes of the message texts joined by newlines;
``"chat_template"`` the UTF-8 bytes of :func:`render_chat_template` (prompt) and :func:`render_answer` (answer)."""


def _content_to_text(content: Any) -> str:
    """Flatten OpenAI message content (a string or a list of parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
            elif isinstance(part, str):
                texts.append(part)
        return "".join(texts)
    return str(content)


def _messages_of(request: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The chat messages of a chat-completions, messages, responses or (text) completions request."""
    if isinstance(request.get("messages"), list):
        return [m for m in request["messages"] if isinstance(m, dict)]
    if isinstance(request.get("prompt"), str):
        return [{"role": "user", "content": request["prompt"]}]
    messages: List[Dict[str, Any]] = []
    if isinstance(request.get("instructions"), str):
        messages.append({"role": "system", "content": request["instructions"]})
    raw_input = request.get("input")
    if isinstance(raw_input, str):
        messages.append({"role": "user", "content": raw_input})
    elif isinstance(raw_input, list):
        for item in raw_input:
            if isinstance(item, dict) and "content" in item:
                messages.append({"role": item.get("role", "user"), "content": item.get("content")})
    return messages


def last_user_message(request: Dict[str, Any]) -> str:
    """Text of the last ``user`` message of a chat-completions or responses request ('' when none)."""
    for message in reversed(_messages_of(request)):
        if message.get("role") == "user":
            return _content_to_text(message.get("content"))
    return ""


def prompt_text(request: Dict[str, Any]) -> str:
    """All message texts of a request joined by newlines (what the prompt token ids are computed from)."""
    return "\n".join(_content_to_text(m.get("content")) for m in _messages_of(request))


def text_token_ids(text: str) -> List[int]:
    """Deterministic mock tokenisation: the UTF-8 byte values of ``text``."""
    return list(text.encode("utf-8"))


def _tool_calls_text(tool_calls: Any) -> str:
    parts = []
    for call in tool_calls or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"<|tool_call|>{function.get('name')}({function.get('arguments')})")
    return "".join(parts)


def render_answer(content: Optional[str], tool_calls: Any = None) -> str:
    """An assistant turn as the ``chat_template`` tokenization renders it, without its role tag:
    ``content`` + ``<|tool_call|>name(arguments)`` per tool call + ``<|end|>``."""
    return f"{content or ''}{_tool_calls_text(tool_calls)}<|end|>"


def render_chat_template(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
    """Chat messages rendered as ``<|role|>`` + the turn (:func:`render_answer` of its content and tool calls) per
    message, then ``<|assistant|>`` when ``add_generation_prompt``."""
    text = "".join(
        f"<|{message.get('role') or 'user'}|>"
        + render_answer(_content_to_text(message.get("content")), message.get("tool_calls"))
        for message in messages
    )
    return text + "<|assistant|>" if add_generation_prompt else text


def mock_logprob(token_id: int, position: int) -> float:
    """The deterministic log-probability the ``chat_template`` tokenization reports for the answer token ``token_id``
    at ``position`` of the answer (a multiple of 1/64 in [-50/64, -1/64], exact in binary and in JSON)."""
    return -float((token_id * 7 + position * 13) % 50 + 1) / 64.0


class MockOpenAIServer:
    """An OpenAI-compatible HTTP server with scripted replies, started on a free loopback port.

    Routes: ``POST /v1/chat/completions`` and ``/chat/completions`` (non-streaming, or SSE with ``stream: true``),
    ``POST /v1/completions``, ``/v1/messages`` (Anthropic format), ``/v1/responses`` (likewise, each also without
    ``/v1``), ``POST /v1/embeddings``, ``GET /v1/models`` and ``GET /health``.

    Args:
        reply: how to answer. A callable receives the JSON request body and returns a :data:`MockReply`; a mapping
            is looked up by the last user message, then the model name, then ``"*"`` (falling back to the echo
            reply); a string is returned as-is; ``None`` echoes ``"echo: <last user message>"``.
        model: model name reported by ``/v1/models`` (responses echo the requested model).
        host: bind address (loopback by default).
        port: port to bind (a free one when ``None``).
        startup_timeout: seconds to wait for the server to accept connections.
        tokenization: token ids of chat completions: ``"text"`` (default) or ``"chat_template"`` (see the module
            docstring; also adds ``logprobs`` when the request asks for them).
    """

    def __init__(
        self,
        reply: ReplySpec = None,
        *,
        model: str = "mock-model",
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        startup_timeout: float = 15.0,
        tokenization: Tokenization = "text",
    ) -> None:
        """Configure the server (it starts on :meth:`start` or when entering the context)."""
        if tokenization not in ("text", "chat_template"):
            raise ValueError(f"tokenization must be 'text' or 'chat_template', got {tokenization!r}")
        self.tokenization = tokenization
        self.reply = reply
        self.model = model
        self.host = host
        self._requested_port = port
        self.port: Optional[int] = None
        self.startup_timeout = startup_timeout
        self.requests: List[Dict[str, Any]] = []
        self._requests_lock = threading.Lock()
        self._server: Any = None
        self._thread: Optional[threading.Thread] = None
        self._socket: Optional[socket.socket] = None
        self._error: Optional[BaseException] = None

    # ------------------------------------------------------------------ addresses

    @property
    def endpoint(self) -> str:
        """``http://host:port`` (raises ``RuntimeError`` before start)."""
        if self.port is None:
            raise RuntimeError("MockOpenAIServer is not running.")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI client base URL, ``http://host:port/v1``."""
        return self.endpoint + "/v1"

    # ------------------------------------------------------------------ reply logic

    def resolve_reply(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """Compute the reply for ``request`` as a dict with at least ``content`` and ``finish_reason``."""
        spec = self.reply
        user = last_user_message(request)
        value: Optional[MockReply]
        if callable(spec):
            value = spec(request)
        elif isinstance(spec, Mapping):
            value = None
            for key in (user, request.get("model"), "*"):
                if isinstance(key, str) and key in spec:
                    value = spec[key]
                    break
            if value is None:
                value = f"echo: {user}"
        elif isinstance(spec, str):
            value = spec
        else:
            value = f"echo: {user}"
        if isinstance(value, dict):
            result = dict(value)
            result.setdefault("content", "")
        else:
            result = {"content": str(value)}
        result.setdefault("finish_reason", "tool_calls" if result.get("tool_calls") else "stop")
        return result

    def _record(self, path: str, body: Dict[str, Any]) -> None:
        with self._requests_lock:
            self.requests.append({"path": path, "body": body})

    def _usage(self, request: Dict[str, Any], content: str) -> Dict[str, int]:
        prompt_tokens = len(text_token_ids(prompt_text(request)))
        completion_tokens = len(text_token_ids(content))
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def chat_token_ids(self, request: Dict[str, Any], reply: Dict[str, Any]) -> tuple[List[int], List[int]]:
        """``(prompt ids, answer ids)`` of a chat completion under this server's tokenization."""
        if self.tokenization == "chat_template":
            prompt = render_chat_template(_messages_of(request))
            return text_token_ids(prompt), text_token_ids(render_answer(reply.get("content"), reply.get("tool_calls")))
        return text_token_ids(prompt_text(request)), text_token_ids(reply.get("content") or "")

    def build_chat_completion(self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The JSON body of a non-streaming chat completion for ``request`` (``reply``: precomputed reply)."""
        reply = reply if reply is not None else self.resolve_reply(request)
        content = reply.get("content")
        message: Dict[str, Any] = {"role": "assistant", "content": content}
        if reply.get("tool_calls"):
            message["tool_calls"] = reply["tool_calls"]
        choice: Dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply["finish_reason"]}
        prompt_ids, answer_ids = self.chat_token_ids(request, reply)
        body: Dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(answer_ids),
                "total_tokens": len(prompt_ids) + len(answer_ids),
            },
        }
        if request.get("return_token_ids"):
            body["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = answer_ids
        if self.tokenization == "chat_template" and request.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {
                        "token": bytes([token]).decode("utf-8", "replace"),
                        "logprob": mock_logprob(token, position),
                        "bytes": [token],
                        "top_logprobs": [],
                    }
                    for position, token in enumerate(answer_ids)
                ]
            }
        return body

    def iter_chat_chunks(
        self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None
    ) -> Iterator[Dict[str, Any]]:
        """The chunks of a streamed chat completion (the content split into a few pieces)."""
        full = self.build_chat_completion(request, reply)
        choice = full["choices"][0]
        content: str = choice["message"].get("content") or ""
        base = {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"], "model": full["model"]}
        pieces = [content[i : i + 4] for i in range(0, len(content), 4)] or [""]
        for index, piece in enumerate(pieces):
            delta: Dict[str, Any] = {"content": piece}
            if index == 0:
                delta["role"] = "assistant"
            yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        final: Dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
        }
        if request.get("return_token_ids"):
            final["prompt_token_ids"] = full["prompt_token_ids"]
            final["choices"][0]["token_ids"] = choice["token_ids"]
        if "logprobs" in choice:
            final["choices"][0]["logprobs"] = choice["logprobs"]
        yield final
        stream_options = request.get("stream_options") or {}
        if isinstance(stream_options, dict) and stream_options.get("include_usage"):
            yield {**base, "choices": [], "usage": full["usage"]}

    def build_response(self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The JSON body of a Responses API response for ``request``."""
        reply = reply if reply is not None else self.resolve_reply(request)
        content = reply.get("content") or ""
        usage = self._usage(request, content)
        body: Dict[str, Any] = {
            "id": f"resp_{uuid.uuid4().hex[:24]}",
            "object": "response",
            "created_at": int(time.time()),
            "model": request.get("model") or self.model,
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex[:24]}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": content, "annotations": []}],
                }
            ],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage["prompt_tokens"],
                "output_tokens": usage["completion_tokens"],
                "total_tokens": usage["total_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if request.get("return_token_ids"):
            body["prompt_token_ids"] = text_token_ids(prompt_text(request))
            body["response_token_ids"] = [text_token_ids(content)]
        return body

    def iter_response_events(
        self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None
    ) -> Iterator[Dict[str, Any]]:
        """The events of a streamed Responses API call."""
        full = self.build_response(request, reply)
        item = full["output"][0]
        text: str = item["content"][0]["text"]
        in_progress = {**full, "status": "in_progress", "output": []}
        seq = 0
        yield {"type": "response.created", "sequence_number": seq, "response": in_progress}
        for i in range(0, len(text), 4):
            seq += 1
            yield {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": text[i : i + 4],
                "logprobs": [],
            }
        seq += 1
        yield {"type": "response.completed", "sequence_number": seq, "response": full}

    def build_completion(self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The JSON body of a (legacy) text completion; token ids go on the choice, as vLLM returns them."""
        reply = reply if reply is not None else self.resolve_reply(request)
        content = reply.get("content") or ""
        choice: Dict[str, Any] = {
            "index": 0,
            "text": content,
            "finish_reason": reply["finish_reason"],
            "logprobs": None,
        }
        if request.get("return_token_ids"):
            choice["prompt_token_ids"] = text_token_ids(prompt_text(request))
            choice["token_ids"] = text_token_ids(content)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [choice],
            "usage": self._usage(request, content),
        }

    def iter_completion_chunks(
        self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None
    ) -> Iterator[Dict[str, Any]]:
        """The chunks of a streamed text completion."""
        full = self.build_completion(request, reply)
        choice = full["choices"][0]
        base = {"id": full["id"], "object": "text_completion", "created": full["created"], "model": full["model"]}
        text: str = choice["text"]
        for i in range(0, len(text), 4):
            yield {**base, "choices": [{"index": 0, "text": text[i : i + 4], "finish_reason": None}]}
        final: Dict[str, Any] = {"index": 0, "text": "", "finish_reason": choice["finish_reason"]}
        for key in ("prompt_token_ids", "token_ids"):
            if key in choice:
                final[key] = choice[key]
        yield {**base, "choices": [final]}

    def build_message(self, request: Dict[str, Any], reply: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The JSON body of an Anthropic Messages API response (tool calls become ``tool_use`` blocks)."""
        reply = reply if reply is not None else self.resolve_reply(request)
        content = reply.get("content") or ""
        blocks: List[Dict[str, Any]] = [{"type": "text", "text": content}] if content else []
        for call in reply.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments})
        usage = self._usage(request, content)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model") or self.model,
            "content": blocks,
            "stop_reason": "tool_use" if reply.get("tool_calls") else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
        }

    def build_embeddings(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """Deterministic 4-dimensional embeddings of each input string."""
        raw = request.get("input")
        inputs = raw if isinstance(raw, list) else [raw]
        data = []
        for index, item in enumerate(inputs):
            ids = text_token_ids(str(item))
            vector = [float(len(ids)), float(sum(ids) % 97), float(ids[0] if ids else 0), float(ids[-1] if ids else 0)]
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(len(text_token_ids(str(item))) for item in inputs)
        return {
            "object": "list",
            "data": data,
            "model": request.get("model") or self.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    # ------------------------------------------------------------------ app

    def build_app(self) -> Any:
        """Create the FastAPI application."""
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, StreamingResponse

        try:
            # FastAPI versions with native OpenTelemetry support would otherwise trace the mock's own requests into
            # whatever tracer provider the test installed.
            app = FastAPI(
                title="rollouthub mock OpenAI server", telemetry={"tracing": False, "metrics": False, "logs": False}
            )
        except TypeError:  # older FastAPI without the ``telemetry`` argument
            app = FastAPI(title="rollouthub mock OpenAI server")

        def sse(events: Iterator[Dict[str, Any]], with_event_names: bool) -> Iterator[str]:
            for event in events:
                prefix = f"event: {event['type']}\n" if with_event_names and "type" in event else ""
                yield f"{prefix}data: {json.dumps(event)}\n\n"
            if not with_event_names:
                yield "data: [DONE]\n\n"

        async def read_json(request: Request) -> Dict[str, Any]:
            try:
                body = await request.json()
            except Exception:
                body = None
            return body if isinstance(body, dict) else {}

        def error_response(reply: Dict[str, Any]) -> Optional[Any]:
            status = reply.get("status_code")
            if isinstance(status, int) and status >= 400:
                message = reply.get("content") or f"mock error {status}"
                return JSONResponse({"error": {"message": message, "type": "mock_error"}}, status_code=status)
            return None

        async def chat_completions(request: Request) -> Any:
            body = await read_json(request)
            self._record(request.url.path, body)
            if not isinstance(body.get("messages"), list):
                return JSONResponse(
                    {"error": {"message": "'messages' is required", "type": "invalid_request_error"}}, status_code=400
                )
            reply = self.resolve_reply(body)
            error = error_response(reply)
            if error is not None:
                return error
            if body.get("stream"):
                chunks = self.iter_chat_chunks(body, reply)
                return StreamingResponse(sse(chunks, False), media_type="text/event-stream")
            return JSONResponse(self.build_chat_completion(body, reply))

        async def completions(request: Request) -> Any:
            body = await read_json(request)
            self._record(request.url.path, body)
            if "prompt" not in body:
                return JSONResponse(
                    {"error": {"message": "'prompt' is required", "type": "invalid_request_error"}}, status_code=400
                )
            reply = self.resolve_reply(body)
            error = error_response(reply)
            if error is not None:
                return error
            if body.get("stream"):
                chunks = self.iter_completion_chunks(body, reply)
                return StreamingResponse(sse(chunks, False), media_type="text/event-stream")
            return JSONResponse(self.build_completion(body, reply))

        async def messages(request: Request) -> Any:
            from rollouthub.llm_proxy.replay import anthropic_stream_events

            body = await read_json(request)
            self._record(request.url.path, body)
            if not isinstance(body.get("messages"), list):
                return JSONResponse(
                    {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: required"}},
                    status_code=400,
                )
            reply = self.resolve_reply(body)
            error = error_response(reply)
            if error is not None:
                return error
            message = self.build_message(body, reply)
            if body.get("stream"):
                return StreamingResponse(iter(anthropic_stream_events(message)), media_type="text/event-stream")
            return JSONResponse(message)

        async def embeddings(request: Request) -> Any:
            body = await read_json(request)
            self._record(request.url.path, body)
            return JSONResponse(self.build_embeddings(body))

        async def responses(request: Request) -> Any:
            body = await read_json(request)
            self._record(request.url.path, body)
            reply = self.resolve_reply(body)
            error = error_response(reply)
            if error is not None:
                return error
            if body.get("stream"):
                events = self.iter_response_events(body, reply)
                return StreamingResponse(sse(events, True), media_type="text/event-stream")
            return JSONResponse(self.build_response(body, reply))

        async def models() -> Dict[str, Any]:
            return {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "rollouthub"}],
            }

        async def health() -> Dict[str, str]:
            return {"status": "ok"}

        for path in ("/v1/chat/completions", "/chat/completions"):
            app.add_api_route(path, chat_completions, methods=["POST"])
        for path in ("/v1/completions", "/completions"):
            app.add_api_route(path, completions, methods=["POST"])
        for path in ("/v1/messages", "/messages"):
            app.add_api_route(path, messages, methods=["POST"])
        for path in ("/v1/embeddings", "/embeddings"):
            app.add_api_route(path, embeddings, methods=["POST"])
        for path in ("/v1/responses", "/responses"):
            app.add_api_route(path, responses, methods=["POST"])
        for path in ("/v1/models", "/models"):
            app.add_api_route(path, models, methods=["GET"])
        app.add_api_route("/health", health, methods=["GET"])
        return app

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> MockOpenAIServer:
        """Start serving in a daemon thread; returns once the port accepts connections."""
        import uvicorn

        from rollouthub.utils.server_launcher import http_protocol

        if self._thread is not None:
            raise RuntimeError("MockOpenAIServer is already running.")
        # proto=IPPROTO_TCP: asyncio enables TCP_NODELAY only on accepted sockets whose proto is TCP; without it a
        # response written in two parts (headers, body) waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port or 0))
        sock.listen(128)
        self._socket = sock
        self.port = sock.getsockname()[1]
        protocol, max_head = http_protocol(None)  # the store server's protocol choice
        config = uvicorn.Config(
            self.build_app(),
            http=protocol,
            h11_max_incomplete_event_size=max_head,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign, attr-defined]
        self._server = server

        def run() -> None:
            try:
                asyncio.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # pragma: no cover - reported by start()
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"mock-openai-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not server.started:
            if self._error is not None or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"MockOpenAIServer failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("MockOpenAIServer did not start in time.")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join its thread."""
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout)
        if self._socket is not None:
            try:
                self._socket.close()
            except OSError:  # pragma: no cover
                pass
        self._server = None
        self._thread = None
        self._socket = None

    def __enter__(self) -> MockOpenAIServer:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        """Stop the server."""
        self.stop()

    async def __aenter__(self) -> MockOpenAIServer:
        """Start the server without blocking the running loop."""
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: Any) -> None:
        """Stop the server without blocking the running loop."""
        await asyncio.to_thread(self.stop)
