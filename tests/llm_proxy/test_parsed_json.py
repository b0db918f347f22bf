"""One JSON parse per body: the proxy's layers pass the objects they parsed to each other."""

from __future__ import annotations

import json
import types
from typing import Any, Dict, List

import pytest

from rollouthub.llm_proxy import engine, middleware, parsed_json
from rollouthub.llm_proxy.parsed_json import REQUEST_BODY, RESPONSE_BODY, remember_json
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer

from .conftest import model_list
from .test_proxy import MakeProxy, attempt, client


def test_the_kept_object_serves_the_same_bytes_once() -> None:
    scope: Dict[str, Any] = {}
    kept = {"model": "m"}
    remember_json(scope, REQUEST_BODY, b'{"model": "m"}', kept)
    copy = dict(scope)  # an inner app's scope copy shares what was kept
    assert parsed_json.parsed_json(copy, REQUEST_BODY, b'{"model": "m"}') is kept
    again = parsed_json.parsed_json(scope, REQUEST_BODY, b'{"model": "m"}')
    assert again == kept and again is not kept  # handed out once, then parsed
    remember_json(scope, RESPONSE_BODY, b'{"a": 1}', {"a": 1})
    assert parsed_json.parsed_json(scope, RESPONSE_BODY, b'{"a": 2}') == {"a": 2}  # rewritten body: parsed
    with pytest.raises(ValueError):
        parsed_json.parsed_json(scope, REQUEST_BODY, b"not json")


@pytest.mark.parametrize("stream", [False, True])
async def test_each_body_is_parsed_once_per_call(
    stream: bool,
    make_proxy: MakeProxy,
    store: InMemoryLightningStore,
    mock_llm: MockOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: List[bytes] = []

    def counting_loads(data: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(bytes(data))
        return json.loads(data, *args, **kwargs)

    counting = types.SimpleNamespace(loads=counting_loads, dumps=json.dumps)
    for module in (middleware, engine, parsed_json):  # the proxy's own parses (not the mock's, not the SDK's)
        monkeypatch.setattr(module, "json", counting)
    proxy = await make_proxy(store=store, model_list=model_list(mock_llm))
    rid, aid = await attempt(store)
    chat = client(proxy.as_resource(rid, aid).endpoint).chat.completions
    if stream:
        chunks = [
            c
            async for c in await chat.create(model="policy", messages=[{"role": "user", "content": "hi"}], stream=True)
        ]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hi"
    else:
        answer = await chat.create(model="policy", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "echo: hi"
    requests = [body for body in parsed if b'"messages"' in body]
    responses = [body for body in parsed if b'"choices"' in body]
    assert (len(requests), len(responses), len(parsed)) == (1, 1, 2)  # the request once, the upstream answer once
    assert len(await store.query_spans(rid)) == 3
