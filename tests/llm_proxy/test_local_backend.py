"""LocalPolicyBackend on its own: batching of concurrent requests, sampling parameters, weight updates and holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, List

import pytest

from rollouthub.llm_proxy.local_api import LocalRequestError
from tests.train_stack import TRAIN_ONLY

from .tiny_policy import gated, lively_tiny_lm, mean_abs_difference, teacher_forced_logprobs

pytestmark = TRAIN_ONLY

QUESTIONS = ["hi", "what is 2 + 2?", "name a colour", "a longer question, padded by the others"]


def chat(content: str, **fields: Any) -> Dict[str, Any]:
    return {"model": "policy", "messages": [{"role": "user", "content": content}], "return_token_ids": True, **fields}


@pytest.fixture()
async def backend() -> AsyncIterator[Any]:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend

    model, tokenizer = lively_tiny_lm(seed=0)
    served = LocalPolicyBackend(model, tokenizer, max_tokens=16, batch_window_s=0.2, max_batch_size=4)
    yield served
    served.close()


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition`` holds (bounded: fails rather than hangs)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def token_ids(answer: Any) -> List[List[int]]:
    return [choice["token_ids"] for choice in answer.body["choices"]]


async def test_concurrent_requests_are_batched_and_greedy_answers_match_one_by_one(backend: Any) -> None:
    assert backend.stats().generation_seconds == 0.0
    alone = [await backend.chat_completion(chat(q, temperature=0, logprobs=True)) for q in QUESTIONS]
    assert backend.stats().batch_sizes == {1: 4}
    generating = backend.stats().generation_seconds
    assert generating > 0  # summed over the four batches
    together = await asyncio.gather(
        *(backend.chat_completion(chat(q, temperature=0, logprobs=True)) for q in QUESTIONS)
    )
    stats = backend.stats()
    assert stats.max_batch_size > 1 and stats.requests == 8 and stats.sequences == 8
    assert stats.generation_seconds > generating
    assert stats.generated_tokens == sum(len(ids) for a in alone + list(together) for ids in token_ids(a))
    for single, batched in zip(alone, together, strict=True):
        assert token_ids(single) == token_ids(batched)
        served = [[e["logprob"] for e in c["logprobs"]["content"]] for c in batched.body["choices"]]
        recomputed = teacher_forced_logprobs(
            backend.model, batched.body["prompt_token_ids"], token_ids(batched)[0], temperature=0
        )
        assert mean_abs_difference(recomputed, served[0]) < 1e-4


async def test_a_batch_never_exceeds_max_batch_size(backend: Any) -> None:
    """A request that does not fit the batch being collected starts the next one (n counts its sequences)."""
    sizes = [3, 2, 3, 1, 4]
    answers = await asyncio.gather(
        *(backend.chat_completion(chat(q, n=n, max_tokens=3)) for q, n in zip(QUESTIONS + ["x"], sizes, strict=True))
    )
    assert [len(a.body["choices"]) for a in answers] == sizes
    stats = backend.stats()
    assert stats.max_batch_size <= 4 and stats.sequences == sum(sizes) and stats.requests == len(sizes)
    assert stats.batches >= 4 and backend.calls_in_flight == 0


async def test_seed_temperature_and_n(backend: Any) -> None:
    first = await backend.chat_completion(chat("hi", temperature=1.0, seed=11, n=3))
    again = await backend.chat_completion(chat("hi", temperature=1.0, seed=11, n=3))
    assert token_ids(first) == token_ids(again)  # same seed, same tokens
    assert len({tuple(ids) for ids in token_ids(first)}) > 1  # n samples are different draws
    others = [token_ids(await backend.chat_completion(chat("hi", temperature=1.0, seed=s))) for s in range(4)]
    assert len({tuple(ids[0]) for ids in others}) > 1  # seeds matter
    cold = await backend.chat_completion(chat("hi", temperature=1e-3, seed=1, max_tokens=8))
    greedy = await backend.chat_completion(chat("hi", temperature=0, max_tokens=8))
    assert token_ids(cold) == token_ids(greedy)  # a near-zero temperature samples the most likely tokens


async def test_answer_fields_and_context_limit(backend: Any) -> None:
    answer = await backend.chat_completion(chat("hi", max_completion_tokens=5, logprobs=True, top_logprobs=2))
    body = answer.body
    choice = body["choices"][0]
    assert answer.policy_version == 0 and body["model"] == "policy" and body["object"] == "chat.completion"
    assert choice["finish_reason"] in ("stop", "length") and len(choice["token_ids"]) <= 5
    assert body["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert body["prompt_token_ids"] == backend.tokenizer.encode("<|user|>hi<|end|><|assistant|>")
    entry = choice["logprobs"]["content"][0]
    assert entry["token"] == backend.tokenizer.decode([choice["token_ids"][0]]) and len(entry["top_logprobs"]) == 2
    with pytest.raises(LocalRequestError) as info:
        await backend.chat_completion(chat("hi", max_tokens=510))
    assert info.value.status == 400 and info.value.param == "max_tokens" and "context (512)" in str(info.value)
    with pytest.raises(LocalRequestError) as info:
        await backend.chat_completion(chat("x" * 600))
    assert info.value.param == "messages"
    with pytest.raises(LocalRequestError, match="unknown role") as info:
        await backend.chat_completion({"model": "policy", "messages": [{"role": "robot", "content": "x"}]})
    assert info.value.status == 400
    assert backend.calls_in_flight == 0  # failed calls leave nothing behind


async def test_load_state_dict_checks_before_copying_and_bumps_the_version(backend: Any) -> None:
    other, _ = lively_tiny_lm(seed=1)
    before = token_ids(await backend.chat_completion(chat("hi", temperature=0)))
    state = other.state_dict()
    weights = {k: v.clone() for k, v in backend.model.state_dict().items()}
    for bad, message in (
        ({**state, "nope": state["model.norm.weight"]}, "unknown key 'nope'"),
        ({k: v for k, v in state.items() if k != "model.norm.weight"}, "missing key 'model.norm.weight'"),
        ({**state, "model.norm.weight": state["model.norm.weight"][:3]}, "has shape"),
    ):
        with pytest.raises(ValueError, match=message):
            backend.load_state_dict(bad)
    assert all((weights[k] == v).all() for k, v in backend.model.state_dict().items())  # unchanged
    assert backend.policy_version == 0
    backend.load_state_dict(state)  # nothing in flight: allowed without a hold, bumps the version
    assert backend.policy_version == 1
    after = await backend.chat_completion(chat("hi", temperature=0, logprobs=True))
    assert after.policy_version == 1 and token_ids(after) != before
    served = [entry["logprob"] for entry in after.body["choices"][0]["logprobs"]["content"]]
    recomputed = teacher_forced_logprobs(other, after.body["prompt_token_ids"], token_ids(after)[0], temperature=0)
    assert mean_abs_difference(recomputed, served) < 1e-4  # served by the loaded weights
    assert await backend.update_weights(weights) == 2
    assert token_ids(await backend.chat_completion(chat("hi", temperature=0))) == before
    with pytest.raises(ValueError, match="exactly one"):
        await backend.update_weights()


async def test_weight_update_holds_new_calls_and_lets_calls_in_flight_finish() -> None:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend
    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=0)
    slow = gated(model)
    backend = LocalPolicyBackend(slow, tokenizer, max_tokens=4, retry_after_s=0.25)
    try:
        in_flight = asyncio.ensure_future(backend.chat_completion(chat("hi", temperature=0)))
        assert await asyncio.to_thread(slow.entered.wait, 30)
        with pytest.raises(RuntimeError, match="in flight"):
            backend.load_state_dict(model.state_dict())  # no silent copy under a running generation
        new_model, _ = build_tiny_lm(seed=1)

        async def update() -> None:
            async with backend.weight_update(timeout=30):
                assert in_flight.done() and backend.holding
                backend.set_model(new_model)

        updating = asyncio.ensure_future(update())
        await until(lambda: backend.holding)
        with pytest.raises(LocalRequestError) as info:
            await backend.chat_completion(chat("hi"))
        assert info.value.status == 429 and info.value.headers == {"Retry-After": "1", "retry-after-ms": "250"}
        assert backend.stats().refused == 1
        with pytest.raises(RuntimeError, match="another weight update"):
            async with backend.weight_update():
                pass
        slow.gate.set()
        first = await in_flight
        await updating
        assert first.policy_version == 0 and not backend.holding and backend.policy_version == 1
        later = await backend.chat_completion(chat("hi", temperature=0))
        assert later.policy_version == 1 and backend.model is new_model
    finally:
        slow.gate.set()
        backend.close()


async def test_a_weight_update_that_fails_or_times_out_changes_nothing() -> None:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend
    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=0)
    slow = gated(model)
    backend = LocalPolicyBackend(slow, tokenizer, max_tokens=2)
    try:
        in_flight = asyncio.ensure_future(backend.chat_completion(chat("hi")))
        assert await asyncio.to_thread(slow.entered.wait, 30)
        with pytest.raises(TimeoutError, match="1 calls still in flight"):
            async with backend.weight_update(timeout=0.05):
                raise AssertionError("the block must not run")
        assert not backend.holding and backend.policy_version == 0
        slow.gate.set()
        await in_flight
        with pytest.raises(KeyError):
            async with backend.weight_update():
                raise KeyError("the algorithm failed")
        assert not backend.holding and backend.policy_version == 0
        assert (await backend.chat_completion(chat("hi"))).policy_version == 0
    finally:
        slow.gate.set()
        backend.close()


async def test_close_refuses_new_calls(backend: Any) -> None:
    await backend.chat_completion(chat("hi", max_tokens=1))
    backend.close()
    with pytest.raises(LocalRequestError) as info:
        await backend.chat_completion(chat("hi"))
    assert info.value.status == 503


def test_options_are_checked() -> None:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend
    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=0)
    for options, name in (
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"batch_window_s": -1}, "batch_window_s"),
        ({"retry_after_s": float("inf")}, "retry_after_s"),
        ({"policy_version": -1}, "policy_version"),
    ):
        with pytest.raises(ValueError, match=name):
            LocalPolicyBackend(model, tokenizer, **options)
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        LocalPolicyBackend(model, tokenizer)


async def test_from_pretrained_serves_a_local_checkpoint(tmp_path: Path) -> None:
    from rollouthub.llm_proxy.local_backend import LocalPolicyBackend
    from rollouthub.testing.tiny_lm import save_tiny_lm

    model, tokenizer = lively_tiny_lm(seed=2)
    save_tiny_lm(model, tokenizer, str(tmp_path / "ckpt"))
    loaded = LocalPolicyBackend.from_pretrained(str(tmp_path / "ckpt"), policy_version=5, max_tokens=6)
    reference = LocalPolicyBackend(model, tokenizer, max_tokens=6)
    try:
        answer = await loaded.chat_completion(chat("hi", temperature=0))
        assert answer.policy_version == 5
        assert token_ids(answer) == token_ids(await reference.chat_completion(chat("hi", temperature=0)))
        with pytest.raises(ValueError, match="unknown dtype"):
            LocalPolicyBackend.from_pretrained(str(tmp_path / "ckpt"), dtype="float33")
    finally:
        loaded.close()
        reference.close()
