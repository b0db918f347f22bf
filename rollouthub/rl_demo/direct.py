"""The RL demo without the stack: sample from the model directly, score, and apply the GRPO update in one process.

This is the reference curve of the demo (what the algorithm alone achieves, with no store, proxy or runners in the
way): ``benchmarks/grpo_learning.py`` runs it for several seeds, the train-leg tests run a short version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="The RL demo")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from rollouthub.algorithm.grpo.update import PolicyUpdater, TokenSample  # noqa: E402
from rollouthub.testing.tiny_lm import build_tiny_lm  # noqa: E402

from .sampling import sample_responses  # noqa: E402
from .settings import DEMO_SETTINGS, DemoSettings  # noqa: E402
from .task import MAX_TOKENS, DemoTask, eval_tasks, reward, train_tasks  # noqa: E402

__all__ = ["EvalPoint", "DirectRun", "evaluate", "run_direct"]


@dataclass(frozen=True)
class EvalPoint:
    """The held-out eval reward (greedy decoding) after ``step`` updates."""

    step: int
    rollouts: int
    """Training rollouts sampled so far."""
    seconds: float
    """Since the start of the run (sampling, updates and evaluations)."""
    reward: float


@dataclass
class DirectRun:
    """The curve and per-step metrics of one seed."""

    seed: int
    curve: List[EvalPoint] = field(default_factory=list)
    steps: List[Dict[str, Any]] = field(default_factory=list)

    def first_reaching(self, threshold: float) -> Optional[EvalPoint]:
        """The first evaluation with a reward >= ``threshold`` (``None``: never)."""
        return next((point for point in self.curve if point.reward >= threshold), None)


def _prompt_ids(tokenizer: Any, task: DemoTask) -> List[int]:
    return list(tokenizer.apply_chat_template(task.messages(), add_generation_prompt=True)["input_ids"])


def _reply(tokenizer: Any, token_ids: Sequence[int]) -> str:
    return str(tokenizer.decode(list(token_ids), skip_special_tokens=True))


def evaluate(model: Any, tokenizer: Any, tasks: Sequence[DemoTask]) -> float:
    """Mean reward of greedy replies to ``tasks`` (temperature 0)."""
    responses = sample_responses(
        model,
        [_prompt_ids(tokenizer, task) for task in tasks],
        temperature=1.0,
        max_new_tokens=MAX_TOKENS,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        greedy=True,
    )
    return sum(reward(task, _reply(tokenizer, r.token_ids)) for task, r in zip(tasks, responses, strict=True)) / len(
        tasks
    )


def run_direct(
    seed: int,
    settings: DemoSettings = DEMO_SETTINGS,
    *,
    max_steps: int = 300,
    max_seconds: float = float("inf"),
    stop_at: Optional[float] = None,
    on_eval: Optional[Callable[[EvalPoint], None]] = None,
) -> DirectRun:
    """Train a freshly built demo model with GRPO on the demo task; evaluate every ``settings.eval_every`` steps.

    Stops after ``max_steps`` updates, once ``max_seconds`` have passed (at the next evaluation), or at the first
    evaluation reaching ``stop_at``. ``on_eval`` sees each evaluation as it happens (progress).
    """
    torch.manual_seed(seed)
    model, tokenizer = build_tiny_lm(seed=seed, **settings.model_sizes())
    updater = PolicyUpdater(model, settings.grpo_config(seed))
    held_out = eval_tasks(settings.eval_size)
    run = DirectRun(seed=seed)
    started = time.perf_counter()
    rollouts = 0

    def record(step: int) -> bool:
        point = EvalPoint(step, rollouts, time.perf_counter() - started, evaluate(updater.model, tokenizer, held_out))
        run.curve.append(point)
        if on_eval is not None:
            on_eval(point)
        return (stop_at is not None and point.reward >= stop_at) or point.seconds >= max_seconds

    if record(0):
        return run
    for step in range(1, max_steps + 1):
        tasks = train_tasks(settings.inputs_per_step, seed=seed * 1_000_003 + step)
        prompts = [_prompt_ids(tokenizer, task) for task in tasks for _ in range(settings.group_size)]
        responses = sample_responses(
            updater.model,
            prompts,
            temperature=settings.temperature,
            max_new_tokens=MAX_TOKENS,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        samples = []
        for index, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            task = tasks[index // settings.group_size]
            samples.append(
                TokenSample(
                    rollout_id=f"{step}-{index}",
                    input_id=f"{step}-{index // settings.group_size}",
                    prompt_ids=prompt,
                    response_ids=response.token_ids,
                    response_mask=[1] * len(response.token_ids),
                    response_logprobs=response.logprobs,
                    reward=reward(task, _reply(tokenizer, response.token_ids)),
                )
            )
        rollouts += len(samples)
        run.steps.append(updater.update(samples).as_dict())
        if (step % settings.eval_every == 0 or step == max_steps) and record(step):
            break
    return run
