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
from rollouthub.rl_demo.agent import ask_policy
from rollouthub.types import LLM, Rollout

REPLY_TOKENS = 6
"""The exactness agent asks for several tokens, so every sample has a sequence of sampled log-probs."""


def letter_share(reply: str) -> float:
    """The share of lowercase letters in the reply (a reward that differs between the replies of a random model)."""
    return sum(character in string.ascii_lowercase for character in reply) / REPLY_TOKENS


@rollout
async def several_tokens_agent(task: Dict[str, Any], llm: LLM, rollout: Rollout) -> float:
    """Ask the policy for ``REPLY_TOKENS`` tokens after the word; reward the share of letters."""
    messages = [{"role": "user", "content": task["word"]}]
    return letter_share(await ask_policy(llm, rollout, messages, REPLY_TOKENS))


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
    val = demo_datasets()[1][: options.get("eval_size") or 10] if agent is not None else None
    return run_on_stack(
        store_url, grpo, n_runners=n_runners, train_dataset=train, llm_proxy=llm_proxy, agent=agent, val_dataset=val
    )


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
