"""A GRPO smoke run on a CUDA GPU (or the CPU): a few steps of the GRPO algorithm through the same code path as the
CPU demo, on the device, with no network and no vLLM; reports the step time and tokens/s.

The run: an in-memory store, runner threads executing a small agent that asks the policy for up to --max-tokens
tokens after a word through the LLM proxy (the local backend serves the policy on the device), and GRPO (group
advantages, clipped loss, AdamW, new weights loaded into the backend, a new policy version) under the Trainer. The
reward (the share of lowercase letters in the reply) only gives the update something to compare: this measures
speed, not learning.

The model: the tiny demo model built from a config (default), or --model PATH, a local Hugging Face checkpoint
whose tokenizer has a chat template (loaded without network access). --dtype bfloat16 runs the update under bf16
autocast (float32 weights); --lora-rank N trains a LoRA adapter (needs peft).

Exit status: 0 after the run; 3 when --device cuda (the default) is asked for and CUDA is not available (one line
says so); 1 for any other error (a missing extra is one line naming it).

    python benchmarks/rl_gpu_smoke.py
    python benchmarks/rl_gpu_smoke.py --model /models/Qwen2.5-0.5B-Instruct --steps 5 --lora-rank 16
    python benchmarks/rl_gpu_smoke.py --device cpu --steps 2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import string
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

NO_CUDA_EXIT = 3
"""Exit status when CUDA was asked for and is not available."""

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]


def build_agent(max_tokens: int) -> Any:
    """The smoke agent: the word as the user message; reward the share of lowercase letters in the reply."""
    from rollouthub.litagent import rollout
    from rollouthub.rl_demo.agent import ask_policy
    from rollouthub.types import LLM, Rollout

    @rollout
    async def smoke_agent(task: Dict[str, Any], llm: LLM, rollout: Rollout) -> float:
        reply = await ask_policy(llm, rollout, [{"role": "user", "content": task["word"]}], max_tokens)
        return sum(character in string.ascii_lowercase for character in reply) / max(len(reply), 1)

    return smoke_agent


def main() -> int:
    """Run the smoke steps and print the figures; see the module docstring for the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a local Hugging Face checkpoint (default: the tiny demo model)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="update precision")
    parser.add_argument("--lora-rank", type=int, default=0, help="train a LoRA adapter of this rank (0: full)")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps (default 3)")
    parser.add_argument("--inputs", type=int, default=4, help="inputs per step (default 4)")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per input (default 8)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per reply at most (default 32)")
    parser.add_argument("--runners", type=int, default=8, help="runner threads (default 8)")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    from rollouthub.utils.extras import MissingExtraError

    try:
        import torch

        from rollouthub.algorithm.grpo import GRPO, GRPOConfig
    except (ImportError, MissingExtraError) as exc:
        print(f"rl_gpu_smoke: {exc}", file=sys.stderr)
        return 1
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"rl_gpu_smoke: CUDA is not available here (torch {torch.__version__}); --device cpu runs on the CPU")
        return NO_CUDA_EXIT
    logging.basicConfig(level=logging.WARNING)
    # Each runner thread has its own tracer; only the first can install the global OpenTelemetry provider, and the
    # others say so at ERROR level. Their spans still reach the store (emitters use the tracer of trace_context()).
    logging.getLogger("rollouthub.tracer.otel").setLevel(logging.CRITICAL)
    from rollouthub.store.memory import InMemoryLightningStore
    from rollouthub.tracer import OtelTracer
    from rollouthub.trainer import Trainer

    try:
        config = GRPOConfig(
            group_size=args.group_size,
            learning_rate=args.learning_rate,
            device=args.device,
            dtype=args.dtype,
            lora_rank=args.lora_rank,
            micro_batch_size=8,
        )
        if args.model:
            model: Any = args.model
            tokenizer = None
        else:
            from rollouthub.testing.tiny_lm import build_tiny_lm

            model, tokenizer = build_tiny_lm(seed=0)
        started = time.perf_counter()
        records: List[Any] = []
        grpo = GRPO(
            model,
            tokenizer,
            config,
            inputs_per_step=args.inputs,
            max_steps=args.steps,
            eval_every=0,
            resource_name="llm",
            backend_options={"max_tokens": args.max_tokens},
            on_step=records.append,
        )
        trainer = Trainer(
            algorithm=grpo,
            n_runners=args.runners,
            store=InMemoryLightningStore(),
            strategy={"type": "shm", "n_runners": args.runners, "main_thread": "algorithm"},
            tracer=OtelTracer(),
        )
        trainer.fit(build_agent(args.max_tokens), train_dataset=[{"word": word} for word in WORDS])
    except (ValueError, MissingExtraError, OSError) as exc:
        print(f"rl_gpu_smoke: {exc}", file=sys.stderr)
        return 1
    steps = [record for record in records if record.rollouts]
    if not steps:
        print("rl_gpu_smoke: no step completed", file=sys.stderr)
        return 1
    measured = steps[1:] or steps  # the first step includes warm-up (kernels, allocator)
    figures = {
        "device": str(grpo.updater.device) if grpo.updater is not None else args.device,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "model": args.model or "tiny demo model",
        "parameters": sum(p.numel() for p in grpo.model.parameters()),
        "steps": len(steps),
        "rollouts_per_step": args.inputs * args.group_size,
        "step_seconds": sum(r.seconds["total"] for r in measured) / len(measured),
        "rollout_seconds": sum(r.seconds["rollouts"] for r in measured) / len(measured),
        "update_seconds": sum(r.seconds["update"] for r in measured) / len(measured),
        "generation_tokens_per_s": sum(r.tokens_per_second or 0.0 for r in measured) / len(measured),
        "update_tokens_per_s": sum(r.update.get("tokens_per_second", 0.0) for r in measured) / len(measured),
        "first_ratio_mean": [r.update.get("first_ratio_mean") for r in steps],
        "policy_version": grpo.policy_version,
        "seconds": time.perf_counter() - started,
    }
    print(
        f"{figures['steps']} GRPO steps on {figures['device']} ({figures['gpu'] or 'CPU'}), {figures['model']} "
        f"({figures['parameters']:,} parameters): {figures['step_seconds']:.2f} s per step (rollouts "
        f"{figures['rollout_seconds']:.2f} s, update {figures['update_seconds']:.2f} s), generation "
        f"{figures['generation_tokens_per_s']:.0f} tokens/s, update {figures['update_tokens_per_s']:.0f} tokens/s; "
        f"policy version {figures['policy_version']}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
