"""Scenario B: a hand-written prompt search wrapped with ``@algo`` and run by the Trainer.

The agent asks an LLM to answer a question with a prompt template, then asks a judge (the same LLM) to score the
answer between 0 and 1. The algorithm tries three templates one after another and reports the best one.

Runs fully offline: unless ``OPENAI_BASE_URL`` is set, the built-in mock OpenAI server of
:mod:`rollouthub.testing` answers (the judge gives 0.7 to "helpful assistant", 0.9 to "knowledgeable AI" and 0.5 to
"friendly chatbot").

    python examples/apo_custom_algorithm_trainer.py                 # client-server strategy (default)
    python examples/apo_custom_algorithm_trainer.py --strategy shm  # shared memory, algorithm on the main thread
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
from contextlib import ExitStack
from typing import Any, Dict, List, Optional, Tuple

from openai import AsyncOpenAI

from rollouthub.algorithm import algo
from rollouthub.cli import plain_text
from rollouthub.emitter import find_final_reward
from rollouthub.litagent import rollout
from rollouthub.store.base import LightningStore
from rollouthub.trainer import Trainer
from rollouthub.types import PromptTemplate

logger = logging.getLogger("apo_custom_algorithm_trainer")

MODEL = os.environ.get("APO_EXAMPLE_MODEL", "gpt-4.1-nano")
TASK = "Explain why the sky appears blue using principles of light scattering in 100 words."
PROMPT_CANDIDATES = [
    "You are a helpful assistant. {any_question}",
    "You are a knowledgeable AI. {any_question}",
    "You are a friendly chatbot. {any_question}",
]
MOCK_SCORES = {"helpful assistant": "0.7", "knowledgeable AI": "0.9", "friendly chatbot": "0.5"}
JUDGE_INSTRUCTION = "Return only a number between 0 and 1"


def mock_reply(request: Dict[str, Any]) -> str:
    """Deterministic mock LLM: echo-style answers, and per-persona judge scores."""
    from rollouthub.testing import last_user_message

    text = last_user_message(request)
    if JUDGE_INSTRUCTION in text:
        for persona, score in MOCK_SCORES.items():
            if persona in text:
                return score
        return "not a number"
    return f"Answer ({text[:60]}): Rayleigh scattering favours short wavelengths."


@rollout
async def apo_rollout(task: str, prompt_template: PromptTemplate) -> float:
    """Answer ``task`` with the prompt, then let a judge score the answer (0.0 when unparsable)."""
    client = AsyncOpenAI()
    prompt = prompt_template.format(any_question=task)
    answer = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}])
    text = answer.choices[0].message.content or ""
    judge = await client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": f"Evaluate how well the output fulfills the task.\nTask: {prompt}\nOutput: {text}\n"
                f"{JUDGE_INSTRUCTION}.",
            }
        ],
    )
    try:
        return float((judge.choices[0].message.content or "").strip())
    except ValueError:
        return 0.0


@algo
async def apo_algorithm(*, store: LightningStore) -> None:
    """Try every prompt candidate on the task and log the best one."""
    results: List[Tuple[str, float]] = []
    for template in PROMPT_CANDIDATES:
        logger.info("Trying prompt: %r", template)
        await store.add_resources({"main_prompt": PromptTemplate(template=template, engine="f-string")})
        rollout_obj = await store.enqueue_rollout(input=TASK, mode="train")
        finished = []
        for _ in range(30):
            finished = await store.wait_for_rollouts(rollout_ids=[rollout_obj.rollout_id], timeout=0.01)
            if finished:
                break
            await asyncio.sleep(1.0)
        if not finished or finished[0].status != "succeeded":
            raise RuntimeError(f"Rollout {rollout_obj.rollout_id} did not succeed: {finished}")
        spans = await store.query_spans(rollout_obj.rollout_id)
        reward = find_final_reward(list(spans))
        logger.info("Prompt %r got reward %s", template, reward)
        results.append((template, reward if reward is not None else 0.0))
    best_prompt, best_reward = max(results, key=lambda item: item[1])
    logger.info("Best prompt found: '%s' with reward %s", best_prompt, best_reward)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_strategy(n_runners: int = 1) -> Dict[str, Any]:
    """The ``"ray"`` strategy of the examples (a local Ray cluster unless Ray is already connected): the runner actors
    import the agent's module from this directory (``PYTHONPATH``: the nodes share this file system; on a cluster
    whose nodes do not, ship it with ``ray_init_kwargs={"runtime_env": {"working_dir": ...}}``) and get this
    process's OpenAI variables (the LLM the agent calls)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env_vars = {name: os.environ[name] for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY") if name in os.environ}
    env_vars["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return {"type": "ray", "n_runners": n_runners, "runtime_env": {"env_vars": env_vars}}


def build_trainer(strategy: str, port: Optional[int] = None) -> Trainer:
    """The Trainer of scenario B for ``strategy`` ``"cs"`` (default tracer), ``"shm"`` (OtelTracer) or ``"ray"`` (one
    runner actor on a local Ray cluster, or on the one Ray is connected to; needs the ``ray`` extra)."""
    runner = {"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 0.5, "poll_interval": 0.2}
    if strategy == "cs":
        return Trainer(n_runners=1, algorithm=apo_algorithm, runner=runner, port=port or _free_port())
    if strategy == "shm":
        from rollouthub.tracer import OtelTracer

        return Trainer(
            n_runners=1,
            algorithm=apo_algorithm,
            runner=runner,
            tracer=OtelTracer(),
            strategy={"type": "shm", "main_thread": "algorithm"},
        )
    if strategy == "ray":
        return Trainer(algorithm=apo_algorithm, runner=runner, strategy=ray_strategy())
    raise ValueError(f"unknown strategy {strategy!r}")


def run(strategy: str = "cs", port: Optional[int] = None) -> Trainer:
    """Run scenario B (starting the mock LLM unless ``OPENAI_BASE_URL`` is set) and return the trainer."""
    with ExitStack() as stack:
        if not os.environ.get("OPENAI_BASE_URL"):
            from rollouthub.testing import MockOpenAIServer

            server = stack.enter_context(MockOpenAIServer(reply=mock_reply))
            stack.callback(os.environ.pop, "OPENAI_BASE_URL", None)
            os.environ["OPENAI_BASE_URL"] = server.base_url
            os.environ.setdefault("OPENAI_API_KEY", "dummy")
        trainer = build_trainer(strategy, port)
        trainer.fit(apo_rollout)
        return trainer


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strategy", choices=["cs", "shm", "ray"], default="cs")
    parser.add_argument("--port", type=int, default=None, help="Store server port (client-server strategy).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")
    run(args.strategy, args.port)


if __name__ == "__main__":
    main()
