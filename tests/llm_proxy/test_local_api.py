"""The local backend's wire format without torch: requests checked at the edge, answers in vLLM's shape."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from rollouthub.llm_proxy.local_api import (
    LocalRequestError,
    SequenceOutput,
    chat_completion_body,
    parse_chat_request,
)

BASE: Dict[str, Any] = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def parse(**fields: Any) -> Any:
    return parse_chat_request({**BASE, **fields}, max_n=4)


def test_defaults_and_supported_fields() -> None:
    request = parse()
    assert request.sampling.temperature == 1.0 and request.sampling.top_p == 1.0 and request.sampling.top_k == 0
    assert request.sampling.n == 1 and request.sampling.max_tokens is None and not request.sampling.logprobs
    assert not request.return_token_ids
    request = parse(
        temperature=0,
        top_p=0.5,
        top_k=-1,
        max_completion_tokens=7,
        stop="\n",
        stop_token_ids=[3],
        seed=5,
        n=4,
        logprobs=1,
        top_logprobs=3,
        return_token_ids=True,
        stream=False,
        frequency_penalty=0,
        presence_penalty=0.0,
        logit_bias={},
        response_format={"type": "text"},
        tool_choice="auto",
        user="u",
        chat_template_kwargs={"enable_thinking": False},
    )
    sampling = request.sampling
    assert sampling.greedy and sampling.logprob_temperature == 1.0
    assert (sampling.top_p, sampling.top_k, sampling.max_tokens, sampling.stop) == (0.5, 0, 7, ("\n",))
    assert (sampling.stop_token_ids, sampling.seed, sampling.n, sampling.top_logprobs) == ((3,), 5, 4, 3)
    assert sampling.logprobs and request.return_token_ids
    assert request.chat_template_kwargs == {"enable_thinking": False}
    assert parse(temperature=0.7).sampling.logprob_temperature == 0.7
    assert parse(max_tokens=3, max_completion_tokens=3).sampling.max_tokens == 3
    assert parse(temperature=None, n=None).sampling.n == 1  # explicit nulls mean "not given"


def test_message_parts_are_joined_into_text() -> None:
    request = parse(
        messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert request.messages == [{"role": "user", "content": "ab"}]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
        ({"max_tokens": 4, "max_completion_tokens": 5}, "max_completion_tokens"),
        ({"stop": ""}, "stop"),
        ({"stop": [1]}, "stop"),
        ({"stop": ["x"] * 17}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"seed": -1}, "seed"),
        ({"seed": "1"}, "seed"),
        ({"n": 0}, "n"),
        ({"n": 5}, "n"),
        ({"logprobs": 2}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": "search"}, "tools"),
        ({"stream": "yes"}, "stream"),
        ({"best_of": 2}, "best_of"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
        ({"model": ""}, "model"),
        ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": "x"}, "chat_template_kwargs"),
    ],
)
def test_invalid_fields_are_a_400_naming_the_field(fields: Dict[str, Any], param: str) -> None:
    with pytest.raises(LocalRequestError) as info:
        parse(**fields)
    error = info.value
    assert error.status == 400 and error.param == param
    assert f"'{param}'" in str(error) and "\n" not in str(error)
    body = error.body()["error"]
    assert body["param"] == param and body["type"] == "invalid_request_error" and body["code"] == "400"


def test_answer_in_vllm_shape() -> None:
    request = parse(n=2, logprobs=True, top_logprobs=1, return_token_ids=True)
    outputs = [
        SequenceOutput([7, 2], [-0.5, -1.0], [[(7, -0.5)], [(2, -1.0)]], "a", "stop"),
        SequenceOutput([8, 8, 8], [-0.1, float("-inf"), -0.3], [[(8, -0.1)]] * 3, "bbb", "length"),
    ]
    body = chat_completion_body(
        request, model="policy", prompt_ids=[1, 2, 3], outputs=outputs, token_text=lambda i: "é" if i == 8 else str(i)
    )
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "policy"
    assert body["prompt_token_ids"] == [1, 2, 3]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    first, second = body["choices"]
    assert first["message"] == {"role": "assistant", "content": "a", "tool_calls": []}
    assert (first["finish_reason"], first["stop_reason"], first["token_ids"]) == ("stop", None, [7, 2])
    entry = second["logprobs"]["content"][0]
    alternative = {"token": "é", "logprob": -0.1, "bytes": [195, 169]}
    assert entry == {**alternative, "top_logprobs": [alternative]}
    assert second["logprobs"]["content"][1]["logprob"] == -9999.0  # JSON has no -inf
    assert second["finish_reason"] == "length" and second["index"] == 1


def test_token_ids_and_logprobs_only_when_asked() -> None:
    body = chat_completion_body(
        parse(),
        model="policy",
        prompt_ids=[1],
        outputs=[SequenceOutput([5], [-0.2], [[]], "x", "length")],
        token_text=str,
    )
    assert "prompt_token_ids" not in body and "token_ids" not in body["choices"][0]
    assert body["choices"][0]["logprobs"] is None
