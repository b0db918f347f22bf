"""The mock OpenAI-compatible server, exercised through the real OpenAI SDK and raw HTTP."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List

import openai
import pytest
import requests

from rollouthub.testing import (
    MockOpenAIServer,
    last_user_message,
    mock_logprob,
    prompt_text,
    render_answer,
    render_chat_template,
    text_token_ids,
)


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    def reply(request: Dict[str, Any]) -> Any:
        user = last_user_message(request)
        if user == "use a tool":
            return {
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
                ],
            }
        if request.get("model") == "shouter":
            return user.upper()
        return f"answer to {user}"

    with MockOpenAIServer(reply=reply) as srv:
        yield srv


@pytest.fixture()
def client(server: MockOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)


def test_base_url_and_health(server: MockOpenAIServer) -> None:
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    assert requests.get(server.endpoint + "/health", timeout=5).json() == {"status": "ok"}


def test_models(client: openai.OpenAI, server: MockOpenAIServer) -> None:
    assert [m.id for m in client.models.list().data] == [server.model]


def test_chat_completion_is_deterministic(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "system", "content": "sys"}, {"role": "user", "content": "2+2?"}]
    first = client.chat.completions.create(model="m", messages=messages)
    second = client.chat.completions.create(model="m", messages=messages)
    assert first.choices[0].message.content == second.choices[0].message.content == "answer to 2+2?"
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].finish_reason == "stop"
    assert first.model == "m"
    assert first.id.startswith("chatcmpl-") and first.id != second.id
    assert (
        first.usage is not None
        and first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    )
    shout = client.chat.completions.create(model="shouter", messages=[{"role": "user", "content": "hey"}])
    assert shout.choices[0].message.content == "HEY"


def test_token_ids_only_on_request(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    plain = client.chat.completions.create(model="m", messages=messages)
    assert getattr(plain, "prompt_token_ids", None) is None
    with_ids = client.chat.completions.create(model="m", messages=messages, extra_body={"return_token_ids": True})
    assert with_ids.prompt_token_ids == text_token_ids("hi")  # type: ignore[attr-defined]
    assert with_ids.choices[0].token_ids == text_token_ids("answer to hi")  # type: ignore[attr-defined]


def test_tool_calls(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "use a tool"}])
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].function.name == "lookup"  # type: ignore[union-attr]


def test_streaming_chat(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "answer to stream me"
    assert chunks[-1].usage is not None and not chunks[-1].choices
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)


def test_chat_completions_without_v1_prefix(server: MockOpenAIServer) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "raw"}]}
    response = requests.post(server.endpoint + "/chat/completions", json=body, timeout=5)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "answer to raw"
    bad = requests.post(server.endpoint + "/v1/chat/completions", json={"model": "m"}, timeout=5)
    assert bad.status_code == 400


def test_responses_api(client: openai.OpenAI) -> None:
    response = client.responses.create(model="m", input="hello", instructions="be brief")
    assert response.output_text == "answer to hello"
    assert response.usage is not None and response.usage.output_tokens == len(text_token_ids("answer to hello"))
    events = list(client.responses.create(model="m", input="hello", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "answer to hello"


async def test_async_client(server: MockOpenAIServer) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="dummy", max_retries=0)
    response = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "async"}])
    assert response.choices[0].message.content == "answer to async"


def test_requests_are_recorded(server: MockOpenAIServer, client: openai.OpenAI) -> None:
    before = len(server.requests)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "log me"}])
    assert server.requests[before]["path"] == "/v1/chat/completions"
    assert server.requests[before]["body"]["messages"][0]["content"] == "log me"


def test_reply_mapping_and_defaults() -> None:
    srv = MockOpenAIServer(reply={"q1": "a1", "special-model": {"content": "x", "finish_reason": "length"}, "*": "z"})
    assert srv.resolve_reply({"messages": [{"role": "user", "content": "q1"}]})["content"] == "a1"
    by_model = srv.resolve_reply({"model": "special-model", "messages": [{"role": "user", "content": "?"}]})
    assert (by_model["content"], by_model["finish_reason"]) == ("x", "length")
    assert srv.resolve_reply({"messages": [{"role": "user", "content": "other"}]})["content"] == "z"
    assert MockOpenAIServer().resolve_reply({"input": "yo"})["content"] == "echo: yo"
    assert MockOpenAIServer(reply="fixed").resolve_reply({})["content"] == "fixed"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert last_user_message(parts) == "ab"
    assert prompt_text({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}) == "s\nu"


def test_not_running_and_restart() -> None:
    srv = MockOpenAIServer()
    with pytest.raises(RuntimeError):
        _ = srv.base_url
    with srv:
        port = srv.port
        assert requests.get(srv.endpoint + "/health", timeout=5).status_code == 200
        with pytest.raises(RuntimeError):
            srv.start()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_streamed_chunk_payloads_are_valid_json(server: MockOpenAIServer) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "s"}], "stream": True, "return_token_ids": True}
    with requests.post(server.endpoint + "/v1/chat/completions", json=body, stream=True, timeout=5) as response:
        lines = [line for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    payloads = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert payloads[-1]["prompt_token_ids"] == text_token_ids("s")


def test_text_completions(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="m", prompt="finish this", extra_body={"return_token_ids": True})
    choice = completion.choices[0]
    assert choice.text == "answer to finish this" and choice.finish_reason == "stop"
    assert choice.prompt_token_ids == text_token_ids("finish this")  # type: ignore[attr-defined]
    assert choice.token_ids == text_token_ids("answer to finish this")  # type: ignore[attr-defined]
    streamed = list(client.completions.create(model="m", prompt="s", stream=True))
    assert "".join(c.choices[0].text for c in streamed) == "answer to s"


def test_anthropic_messages_and_embeddings(server: MockOpenAIServer, client: openai.OpenAI) -> None:
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "use a tool"}]}
    message = requests.post(server.endpoint + "/v1/messages", json=body, timeout=5).json()
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert message["content"] == [{"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": 1}}]
    with requests.post(server.endpoint + "/messages", json={**body, "stream": True}, stream=True, timeout=5) as r:
        events = [line for line in r.iter_lines(decode_unicode=True) if line.startswith("event: ")]
    assert events[0] == "event: message_start" and events[-1] == "event: message_stop"
    embeddings = client.embeddings.create(model="m", input=["ab", "c"])
    assert [e.embedding for e in embeddings.data] == [[2.0, 195 % 97, 97.0, 98.0], [1.0, 99 % 97, 99.0, 99.0]]


def test_error_replies() -> None:
    with MockOpenAIServer(reply=lambda request: {"status_code": 503, "content": "overloaded"}) as srv:
        sdk = openai.OpenAI(base_url=srv.base_url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert requests.post(srv.endpoint + "/v1/completions", json={"prompt": "p"}, timeout=5).status_code == 503


def test_chat_template_tokenization_has_the_prefix_property_and_logprobs() -> None:
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}

    def reply(request: Dict[str, Any]) -> Any:
        return "done" if request["messages"][-1]["role"] == "tool" else {"content": None, "tool_calls": [tool_call]}

    with MockOpenAIServer(reply=reply, tokenization="chat_template") as srv:
        url = srv.base_url + "/chat/completions"
        messages: List[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
        options = {"model": "m", "return_token_ids": True, "logprobs": True}
        first = requests.post(url, json={**options, "messages": messages}, timeout=10).json()
        assert bytes(first["prompt_token_ids"]).decode() == "<|system|>sys<|end|><|user|>hi<|end|><|assistant|>"
        answer = first["choices"][0]["token_ids"]
        assert bytes(answer).decode() == '<|tool_call|>lookup({"q": 1})<|end|>'
        assert first["usage"]["completion_tokens"] == len(answer)
        logprobs = first["choices"][0]["logprobs"]["content"]
        assert [entry["logprob"] for entry in logprobs] == [mock_logprob(t, i) for i, t in enumerate(answer)]
        assert len({entry["logprob"] for entry in logprobs}) > 1
        # The agent re-sends the conversation with the tool call and its result: the prompt continues exactly.
        messages += [{"role": "assistant", "content": None, "tool_calls": [tool_call]}]
        messages += [{"role": "tool", "tool_call_id": "call_1", "content": "42"}]
        second = requests.post(url, json={**options, "messages": messages}, timeout=10).json()
        head = first["prompt_token_ids"] + answer
        assert second["prompt_token_ids"][: len(head)] == head
        assert bytes(second["prompt_token_ids"][len(head) :]).decode() == "<|tool|>42<|end|><|assistant|>"
        assert bytes(second["choices"][0]["token_ids"]).decode() == render_answer("done") == "done<|end|>"
        assert second["prompt_token_ids"] == text_token_ids(render_chat_template(messages))
        # Without the request's options: no ids, no logprobs.
        plain = requests.post(url, json={"model": "m", "messages": messages}, timeout=10).json()
        assert "prompt_token_ids" not in plain and "logprobs" not in plain["choices"][0]


def test_default_tokenization_is_unchanged_by_logprobs_and_checked(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    completion = client.chat.completions.create(
        model="m", messages=messages, logprobs=True, extra_body={"return_token_ids": True}
    )
    assert completion.choices[0].logprobs is None
    assert completion.model_extra is not None and completion.model_extra["prompt_token_ids"] == text_token_ids(
        "sys\nhi"
    )
    with pytest.raises(ValueError, match="tokenization must be 'text' or 'chat_template', got 'bpe'"):
        MockOpenAIServer(tokenization="bpe")  # type: ignore[arg-type]
