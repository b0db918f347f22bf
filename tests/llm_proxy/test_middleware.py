"""Middlewares and stream replay, driven as plain ASGI apps."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Optional, Tuple

import pytest

from rollouthub.llm_proxy import (
    LLMProxy,
    MessageInspectionMiddleware,
    RolloutAttemptMiddleware,
    StreamConversionMiddleware,
    set_active_llm_proxy,
)
from rollouthub.llm_proxy.replay import anthropic_stream_events, openai_stream_events, split_text
from rollouthub.llm_proxy.streams import SSEParser, stream_accumulator
from rollouthub.store.memory import InMemoryLightningStore

Seen = Dict[str, Any]


def make_app(status: int = 200, body: Any = None, raw: Optional[bytes] = None) -> Tuple[Any, List[Seen]]:
    """A downstream ASGI app recording what it received and answering with ``body`` (JSON) or ``raw``."""
    seen: List[Seen] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen.append({"scope": scope, "body": message.get("body", b"")})
        payload = raw if raw is not None else json.dumps(body).encode()
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": payload})

    return app, seen


async def call(
    app: Any, path: str, body: Any = None, method: str = "POST", headers: Any = ()
) -> Tuple[int, Dict[bytes, bytes], bytes]:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": [(b"content-length", str(len(payload)).encode()), *headers],
        "query_string": b"",
    }
    sent = False

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        return {"type": "http.disconnect"}

    start: Dict[str, Any] = {}
    chunks: List[bytes] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        else:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return start["status"], dict(start.get("headers", [])), b"".join(chunks)


CHAT = {
    "id": "chatcmpl-1",
    "created": 7,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The quick brown fox jumps over the lazy dog, twice over.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": json.dumps({"x": "y" * 50})},
                    }
                ],
            },
            "finish_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
}


def decode_openai(lines: List[str]) -> List[Any]:
    assert lines[-1] == "data: [DONE]\n\n"
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


def test_split_text() -> None:
    assert split_text("", 5) == []
    assert split_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert split_text("aa bb cc dd", 6) == ["aa bb ", "cc dd"]


def test_openai_replay() -> None:
    events = decode_openai(openai_stream_events(CHAT, include_usage=True))
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "m" for e in events)
    assert events[0]["id"].startswith("chatcmpl-") and events[0]["id"] != "chatcmpl-1"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    contents = [
        e["choices"][0]["delta"]["content"] for e in events if e["choices"] and "content" in e["choices"][0]["delta"]
    ]
    assert "".join(contents) == CHAT["choices"][0]["message"]["content"]  # type: ignore[index]
    assert all(len(c) <= 28 for c in contents) and contents[0].endswith(" ")
    calls = [
        e["choices"][0]["delta"]["tool_calls"][0]
        for e in events
        if e["choices"] and "tool_calls" in e["choices"][0]["delta"]
    ]
    assert calls[0] == {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    arguments = [c["function"]["arguments"] for c in calls[1:]]
    assert max(len(a) for a in arguments) == 40 and json.loads("".join(arguments)) == {"x": "y" * 50}
    assert events[-2]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 3
    plain = decode_openai(
        openai_stream_events({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]})
    )
    assert plain[-1]["choices"][0]["finish_reason"] == "length"
    assert (
        decode_openai(openai_stream_events({"choices": [{"message": {"content": "x"}}]}))[-1]["choices"][0][
            "finish_reason"
        ]
        == "stop"
    )
    with pytest.raises(ValueError):
        openai_stream_events({"choices": []})


def test_openai_replay_carries_token_ids_like_vllm() -> None:
    """Prompt token ids on the first chunk, the answer's token ids and log-probs on the final one."""
    logprobs = {"content": [{"token": "h", "logprob": -0.5, "bytes": [104], "top_logprobs": []}]}
    response = {
        "model": "m",
        "prompt_token_ids": [1, 2],
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                "token_ids": [104, 105, 2],
                "logprobs": logprobs,
            }
        ],
    }
    events = decode_openai(openai_stream_events(response))
    assert events[0]["prompt_token_ids"] == [1, 2] and "prompt_token_ids" not in events[1]
    final = events[-1]["choices"][0]
    assert final["token_ids"] == [104, 105, 2] and final["logprobs"] == logprobs and final["finish_reason"] == "stop"
    assert all("token_ids" not in e["choices"][0] for e in events[:-1])


def test_anthropic_replay() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [
            {"type": "text", "text": "one two three four five six seven"},
            {"type": "tool_use", "id": "tu1", "name": "search", "input": {"query": "a long query string here"}},
        ],
        "stop_reason": None,
        "usage": {"input_tokens": 3, "output_tokens": 9},
    }
    lines = anthropic_stream_events(message)
    events = []
    for line in lines:
        name_line, data_line, _ = line.split("\n", 2)
        event = json.loads(data_line[len("data: ") :])
        assert name_line == f"event: {event['type']}"
        events.append(event)
    types = [e["type"] for e in events]
    assert types[:2] == ["message_start", "ping"] and types[-2:] == ["message_delta", "message_stop"]
    assert events[0]["message"]["content"] == [] and events[0]["message"]["id"] == "msg_1"
    texts = [e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta"]
    assert texts == ["one two three four five ", "six seven"]
    pieces = [e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"]
    assert all(len(p) <= 20 for p in pieces) and json.loads("".join(pieces)) == message["content"][1]["input"]  # type: ignore[index]
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts == [{"type": "text", "text": ""}, {"type": "tool_use", "id": "tu1", "name": "search", "input": {}}]
    assert events[-2]["delta"]["stop_reason"] == "end_turn" and events[-2]["usage"] == {"output_tokens": 9}
    with pytest.raises(ValueError):
        anthropic_stream_events({"type": "error"})
    # The passthrough accumulator rebuilds the message from its own replay.
    parser, accumulator = SSEParser(), stream_accumulator("messages")
    for line in lines:
        for event in parser.feed(line.encode()):
            accumulator.add(event)
    rebuilt = accumulator.build()
    assert rebuilt["content"] == message["content"] and rebuilt["stop_reason"] == "end_turn"


async def test_stream_conversion_middleware() -> None:
    app, seen = make_app(body=CHAT)
    status, headers, body = await call(
        StreamConversionMiddleware(app),
        "/rollout/r/attempt/a/v1/chat/completions",
        {"model": "m", "stream": True, "stream_options": {"include_usage": True}},
        headers=[(b"accept", b"text/event-stream")],
    )
    forwarded = json.loads(seen[0]["body"])
    assert forwarded == {"model": "m", "stream": False}
    inner_headers = dict(seen[0]["scope"]["headers"])
    assert inner_headers[b"accept"] == b"application/json"
    assert inner_headers[b"content-length"] == str(len(seen[0]["body"])).encode()
    assert status == 200 and headers[b"content-type"].startswith(b"text/event-stream")
    assert (headers[b"cache-control"], headers[b"connection"], headers[b"x-accel-buffering"]) == (
        b"no-cache",
        b"keep-alive",
        b"no",
    )
    events = [e for e in SSEParser().feed(body)]
    assert events[-1]["usage"]["total_tokens"] == 3 and body.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("status", "response", "request_body"),
    [
        (500, {"error": {"message": "boom"}}, {"stream": True}),  # non-2xx: passthrough
        (200, {"no": "choices"}, {"stream": True}),  # conversion error: buffered response
        (200, CHAT, {"stream": False}),  # not a stream request
        (200, CHAT, b"not json"),  # non-JSON request body
    ],
)
async def test_stream_conversion_passthrough(status: int, response: Any, request_body: Any) -> None:
    app, seen = make_app(status=status, body=response)
    got_status, headers, body = await call(StreamConversionMiddleware(app), "/v1/chat/completions", request_body)
    assert got_status == status and json.loads(body) == response
    if isinstance(request_body, dict) and request_body.get("stream"):  # converted, then buffered by the middleware
        assert headers[b"content-length"] == str(len(body)).encode()
        assert json.loads(seen[0]["body"]) == {"stream": False}
    else:
        sent = request_body if isinstance(request_body, bytes) else json.dumps(request_body).encode()
        assert seen[0]["body"] == sent


async def test_stream_conversion_ignores_other_routes() -> None:
    app, seen = make_app(body={"ok": True})
    await call(StreamConversionMiddleware(app), "/v1/completions", {"stream": True})
    assert json.loads(seen[0]["body"]) == {"stream": True}


async def test_rollout_attempt_middleware(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryLightningStore()
    proxy = LLMProxy(host="127.0.0.1", store=store)
    app, seen = make_app(body={})
    middleware = RolloutAttemptMiddleware(app, llm_proxy=proxy)
    spoofed = [(b"x-sequence-id", b"999"), (b"x-rollout-id", b"evil")]
    await call(middleware, "/rollout/ro-1/attempt/at-1/v1/chat/completions", {}, headers=spoofed)
    await call(middleware, "/rollout/ro-1/attempt/at-1", {})
    await call(middleware, "/v1/models", {}, method="GET")
    first, second, plain = (s["scope"] for s in seen)
    assert (first["path"], first["raw_path"]) == ("/v1/chat/completions", b"/v1/chat/completions")
    headers = [(k, v) for k, v in first["headers"] if k.startswith(b"x-")]
    assert headers == [(b"x-rollout-id", b"ro-1"), (b"x-attempt-id", b"at-1"), (b"x-sequence-id", b"1")]
    assert second["path"] == "/" and dict(second["headers"])[b"x-sequence-id"] == b"2"
    assert plain["path"] == "/v1/models" and b"x-rollout-id" not in dict(plain["headers"])
    # Without an explicit proxy the active one is used; without any store: a warning and no headers.
    set_active_llm_proxy(LLMProxy(host="127.0.0.1"))
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.middleware"):
        await call(RolloutAttemptMiddleware(app), "/rollout/ro-2/attempt/at-2/chat/completions", {})
    assert "No store" in caplog.text and b"x-rollout-id" not in dict(seen[-1]["scope"]["headers"])


async def test_rollout_attempt_middleware_store_failure() -> None:
    class Broken(InMemoryLightningStore):
        async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
            raise ConnectionError("store down")

    app, seen = make_app(body={})
    status, _, body = await call(
        RolloutAttemptMiddleware(app, llm_proxy=LLMProxy(host="127.0.0.1", store=Broken())),
        "/rollout/r/attempt/a/chat/completions",
        {},
    )
    assert status == 503 and "store down" in json.loads(body)["error"]["message"] and not seen


async def test_message_inspection_middleware(caplog: pytest.LogCaptureFixture) -> None:
    app, _ = make_app(body={"answer": 42})
    with caplog.at_level(logging.INFO, logger="rollouthub.llm_proxy.middleware"):
        status, _, _ = await call(
            MessageInspectionMiddleware(app),
            "/v1/chat/completions",
            {"q": 1},
            headers=[(b"authorization", b"Bearer s")],
        )
    assert status == 200
    assert '{"q": 1}' in caplog.text and '{"answer": 42}' in caplog.text and "status=200" in caplog.text
    assert "Bearer s" not in caplog.text
