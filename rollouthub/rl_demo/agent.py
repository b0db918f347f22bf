"""The RL demo's agent: asks the policy behind the LLM proxy for the last letter of a word and scores the reply.

No torch here: runner processes import it without the ``[train]`` extra. The agent reads the sampling temperature
from the ``llm`` resource (the GRPO algorithm publishes it) and uses temperature 0 for validation rollouts (mode
``val``): the held-out eval reward is the greedy policy's. It asks for ``MAX_TOKENS`` tokens; the proxy adds the
token ids and log-probs to the request and records them in the spans the trainer reads.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict, List, Tuple

from rollouthub.litagent import rollout
from rollouthub.types import LLM, Rollout

from .task import MAX_TOKENS, DemoTask, reward

__all__ = ["ask_policy", "last_letter_agent", "temperature_of"]

_clients: Dict[Tuple[int, int, str], Any] = {}


def _client(base_url: str, api_key: str) -> Any:
    """An OpenAI client for ``base_url`` sharing one HTTP connection pool per process, event loop and key.

    Creating a client builds a TLS context (about 40 ms of CPU); every rollout has its own base URL (the proxy routes
    by rollout and attempt), so one client per process and loop is copied with the rollout's URL instead.
    """
    from openai import AsyncOpenAI

    key = (os.getpid(), id(asyncio.get_running_loop()), api_key)
    client = _clients.get(key)
    if client is None:
        # 429 answers (weights being swapped) carry Retry-After; the SDK honours it on retry.
        client = _clients[key] = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=3)
    return client.with_options(base_url=base_url)


def temperature_of(llm: LLM, rollout: Rollout) -> float:
    """The sampling temperature of a rollout: 0 for validation, else the resource's (1.0 when it names none)."""
    if rollout.mode == "val":
        return 0.0
    return float(llm.sampling_parameters.get("temperature", 1.0))


async def ask_policy(llm: LLM, rollout: Rollout, messages: List[Dict[str, str]], max_tokens: int) -> str:
    """One chat call to the policy behind the proxy at the rollout's temperature (:func:`temperature_of`); the reply.

    The proxy serves the OpenAI routes with and without the /v1 prefix: the endpoint is used as the base URL as it is.
    """
    response = await _client(llm.endpoint, llm.api_key or "dummy").chat.completions.create(
        model=llm.model,
        messages=messages,  # type: ignore[arg-type]
        temperature=temperature_of(llm, rollout),
        max_tokens=max_tokens,
    )
    return response.choices[0].message.content or ""


@rollout
async def last_letter_agent(task: Dict[str, Any], llm: LLM, rollout: Rollout) -> float:
    """Send the task's word to the policy; reward 1.0 when the reply is exactly its last letter."""
    demo = DemoTask.from_input(task)
    return reward(demo, await ask_policy(llm, rollout, demo.messages(), MAX_TOKENS))
