"""APO units with a stubbed optimiser and a simulated runner."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from rollouthub.algorithm import APO as APOFactory
from rollouthub.algorithm.apo import APO, VersionedPromptTemplate
from rollouthub.algorithm.apo.prompts import CRITIQUE_TEMPLATES, EDIT_TEMPLATES
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import LLM, PromptTemplate

from .helpers import StubOptimizer, simulated_runner

EXPERIMENTS = [
    {
        "status": "succeeded",
        "final_reward": 0.2,
        "spans": [{"name": "openai.chat", "attributes": {"x": 1}}],
        "messages": [{"messages": [{"role": "user", "content": "Answer 1+1"}, {"role": "assistant", "content": "2"}]}],
    }
]


def test_prompts_render_chat_messages() -> None:
    for render in CRITIQUE_TEMPLATES:
        messages = render("Answer {q}", EXPERIMENTS)
        assert messages[-1]["role"] == "user"
        joined = "\n".join(m["content"] for m in messages)
        assert "Answer {q}" in joined
    assert "Answer 1+1" in CRITIQUE_TEMPLATES[0]("T", EXPERIMENTS)[-1]["content"]
    assert "openai.chat" in CRITIQUE_TEMPLATES[1]("T", EXPERIMENTS)[-1]["content"]
    for render in EDIT_TEMPLATES:
        joined = "\n".join(m["content"] for m in render("Answer {q}", "- be strict"))
        assert "Answer {q}" in joined and "- be strict" in joined


def test_factory_and_validation() -> None:
    apo = APOFactory(StubOptimizer())
    assert isinstance(apo, APO)
    with pytest.raises(ValueError):
        apo.get_best_prompt()
    with pytest.raises(ValueError):
        apo.get_seed_prompt_template()
    apo.set_initial_resources({"llm": LLM(endpoint="http://x", model="m")})
    with pytest.raises(ValueError):
        apo.get_seed_prompt_template()
    apo.set_initial_resources(
        {"llm": LLM(endpoint="http://x", model="m"), "p": PromptTemplate(template="A {q}", engine="f-string")}
    )
    assert apo.get_seed_prompt_template()[0] == "p"
    pytest.importorskip("rollouthub.adapter")
    not_messages = object.__new__(type("NotMessages", (), {}))
    apo.set_adapter(not_messages)
    with pytest.raises(ValueError, match="TraceToMessages"):
        apo.get_adapter()


async def test_gradient_and_edit_with_stub() -> None:
    stub = StubOptimizer()
    apo = APO(stub, gradient_model="grad-model", apply_edit_model="edit-model", gradient_batch_size=4)
    prompt = VersionedPromptTemplate("v0", PromptTemplate(template="Answer {q}", engine="f-string"))
    new_text = await apo.textual_gradient_and_apply_edit(prompt, EXPERIMENTS)
    assert new_text == "STRICT Answer {q}"
    assert stub.count("grad-model") == 1 and stub.count("edit-model") == 1
    assert all(c["temperature"] == 1.0 for c in stub.calls)

    class EmptyCritique(StubOptimizer):
        async def _create(self, *, model: str, messages: Any, temperature: float) -> Any:
            result = await super()._create(model=model, messages=messages, temperature=temperature)
            if model == self.gradient_model:
                result.choices[0].message.content = ""
            return result

    empty = EmptyCritique()
    apo2 = APO(empty, gradient_model="grad-model", apply_edit_model="edit-model")
    assert await apo2.textual_gradient_and_apply_edit(prompt, EXPERIMENTS) == "Answer {q}"
    assert empty.count("edit-model") == 0


def _reward(task: Any, resources: Any) -> float:
    template = next(r for r in resources.values() if isinstance(r, PromptTemplate))
    return 1.0 if "STRICT" in template.format(q=task) else 0.2


async def test_apo_run_end_to_end_with_simulated_runner() -> None:
    pytest.importorskip("rollouthub.adapter")
    pytest.importorskip("rollouthub.emitter")
    from rollouthub.adapter import TraceToMessages

    stub = StubOptimizer()
    apo = APO(
        stub,
        gradient_model="grad-model",
        apply_edit_model="edit-model",
        gradient_batch_size=2,
        val_batch_size=3,
        beam_width=2,
        branch_factor=2,
        beam_rounds=2,
    )
    apo._poll_interval = 0.05
    store = InMemoryLightningStore()
    adapter = TraceToMessages()
    apo.set_store(store)
    apo.set_adapter(adapter)
    apo.set_initial_resources({"prompt_template": PromptTemplate(template="Answer {q}", engine="f-string")})
    stop = asyncio.Event()
    runner = asyncio.create_task(simulated_runner(store, _reward, stop))
    await asyncio.wait_for(apo.run(train_dataset=list(range(6)), val_dataset=list(range(4))), 60)
    stop.set()
    await runner
    assert apo.history[0] == ("initial", "v0", pytest.approx(0.2))
    assert "STRICT" in apo.get_best_prompt().template
    assert stub.count("grad-model") == 2 * 2 * 2 and stub.count("edit-model") == 8
    resources = await store.query_resources()
    assert apo.run_id is not None and apo.run_id.startswith("apo-")
    assert {f"{apo.run_id}-v0", f"{apo.run_id}-v1", f"{apo.run_id}-v8"} <= {r.resources_id for r in resources}
    # Each prompt version is published once and never updated (re-evaluating it reuses the snapshot).
    assert {r.version for r in resources} == {1}
    rollouts = await store.query_rollouts()
    assert all(r.status == "succeeded" for r in rollouts)
    assert not math.isinf(apo._best_prompt.score)  # type: ignore[union-attr]
