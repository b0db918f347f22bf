"""A simulated runner for algorithm tests: claims rollouts from a store and writes one reward span each."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from rollouthub.store.base import LightningStore
from rollouthub.types import NamedResources, Span

RewardFn = Callable[[Any, NamedResources], float]


async def simulated_runner(
    store: LightningStore, reward_fn: RewardFn, stop: asyncio.Event, worker_id: str = "Worker-0"
) -> int:
    """Serve rollouts until ``stop`` is set; return how many were completed."""
    done = 0
    while not stop.is_set():
        rollout = await store.dequeue_rollout(worker_id=worker_id)
        if rollout is None:
            await asyncio.sleep(0.005)
            continue
        update = (
            await store.get_resources_by_id(rollout.resources_id)
            if rollout.resources_id
            else await store.get_latest_resources()
        )
        resources: NamedResources = update.resources if update is not None else {}
        reward: Optional[float] = reward_fn(rollout.input, resources)
        seq = await store.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
        await store.add_span(
            Span.from_attributes(
                attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward},
                name="agentlightning.annotation",
                rollout_id=rollout.rollout_id,
                attempt_id=rollout.attempt.attempt_id,
                sequence_id=seq,
            )
        )
        await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
        done += 1
    return done


class _Obj:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class StubOptimizer:
    """An ``AsyncOpenAI`` look-alike for APO: critiques for the gradient model, ``STRICT`` edits for the edit model."""

    def __init__(self, gradient_model: str = "grad-model", edit_model: str = "edit-model", keyword: str = "STRICT"):
        self.gradient_model = gradient_model
        self.edit_model = edit_model
        self.keyword = keyword
        self.calls: list[dict[str, Any]] = []
        self.chat = _Obj(completions=_Obj(create=self._create))

    async def _create(self, *, model: str, messages: list[dict[str, str]], temperature: float) -> Any:
        self.calls.append({"model": model, "messages": messages, "temperature": temperature})
        if model == self.gradient_model:
            content = f"- Be {self.keyword}: require a precise answer."
        else:
            text = "\n".join(m["content"] for m in messages)
            start, end = text.find("<template>\n"), text.find("\n</template>")
            if start < 0:
                start, end = text.find("<prompt>\n") + len("<prompt>\n") - len("<template>\n"), text.find("\n</prompt>")
            template = text[start + len("<template>\n") : end]
            content = template if template.startswith(self.keyword) else f"{self.keyword} {template}"
        return _Obj(choices=[_Obj(message=_Obj(content=content))])

    def count(self, model: str) -> int:
        return sum(1 for c in self.calls if c["model"] == model)
