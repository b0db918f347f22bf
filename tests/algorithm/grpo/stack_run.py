"""A small GRPO run through the full stack (store server, runner processes, proxy, local backend), for the tests.

Importable (``small_run``) and runnable as a trainer process (the crash-and-resume test SIGKILLs it)::

    python -m tests.algorithm.grpo.stack_run --store URL --checkpoint-dir DIR --max-steps 6 [--resume]
"""

from __future__ import annotations

import argparse
import json
import string
from typing import Any, Dict, List, Optional

from rollouthub.litagent import rollout
from rollouthub.types import LLM, Rollout

REPLY_TOKENS = 6
"""The exactness agent asks for several tokens, so every sample has a sequence of sampled log-probs."""


def letter_share(reply: str) -> float:
    """The share of lowercase letters in the reply (a reward that differs between the replies of a random model)."""
    return sum(character in string.ascii_lowercase for character in reply) / REPLY_TOKENS


@rollout
async def several_tokens_agent(task: Dict[str, Any], llm: LLM, rollout: Rollout) -> float:
    """Ask the policy for ``REPLY_TOKENS`` tokens after the word; reward the share of letters."""
    from openai import AsyncOpenAI

    temperature = 0.0 if rollout.mode == "val" else float(llm.sampling_parameters.get("temperature", 1.0))
    async with AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy", max_retries=3) as client:
        response = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": task["word"]}],
            temperature=temperature,
            max_tokens=REPLY_TOKENS,
        )
    return letter_share(response.choices[0].message.content or "")


def small_run(
    store_url: str,
    *,
    seed: int = 0,
    max_steps: int = 2,
    inputs_per_step: int = 2,
    group_size: int = 4,
    n_runners: int = 2,
    agent: Any = None,
    train_words: Optional[List[str]] = None,
    llm_proxy: Any = None,
    **options: Any,
) -> Any:
    """Train the demo model for ``max_steps`` small steps through the stack; returns the :class:`GRPO`."""
    import torch

    from rollouthub.rl_demo.stack import build_demo_grpo, demo_datasets, run_on_stack

    torch.set_num_threads(1)
    train = [{"word": word} for word in train_words] if train_words else None
    grpo = build_demo_grpo(
        seed,
        max_steps=max_steps,
        inputs_per_step=inputs_per_step,
        config={"group_size": group_size, **options.pop("config", {})},
        **options,
    )
    if agent is None:
        return run_on_stack(store_url, grpo, n_runners=n_runners, train_dataset=train, llm_proxy=llm_proxy)
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.tracer import OtelTracer
    from rollouthub.trainer import Trainer

    _, val = demo_datasets()
    trainer = Trainer(
        algorithm=grpo,
        n_runners=n_runners,
        store=LightningStoreClient(store_url),
        strategy={"type": "cs", "managed_store": False, "n_runners": n_runners},
        tracer=OtelTracer(),
    )
    trainer.fit(agent, train_dataset=train or demo_datasets()[0], val_dataset=val[: options.get("eval_size") or 10])
    return grpo


def main(argv: Optional[List[str]] = None) -> int:
    """Run a small GRPO with checkpoints (the crash-and-resume test's trainer process); prints the summary."""
    parser = argparse.ArgumentParser(description="A small GRPO run through the stack, with checkpoints.")
    parser.add_argument("--store", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--checkpoint-every", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    grpo = small_run(
        args.store,
        max_steps=args.max_steps,
        checkpoint_dir=args.checkpoint_dir,
        resume=args.resume,
        eval_every=0,
        eval_size=10,
        config={"checkpoint_every": args.checkpoint_every},
    )
    summary = grpo.summary
    print(
        json.dumps(
            {
                "run_id": summary.run_id,
                "steps": summary.steps,
                "policy_version": summary.policy_version,
                "resumed_from": summary.resumed_from,
                "session": grpo.session,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
