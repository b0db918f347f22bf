"""The RL demo through the full stack: a store server, runner processes calling the policy through the LLM proxy,
and :class:`~rollouthub.algorithm.grpo.GRPO` in this process (``[train]`` extra).

``python -m rollouthub.quickstart --rl``, ``benchmarks/rl_step.py`` and the train-leg tests run it with
:func:`run_on_stack`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="The RL demo")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from rollouthub.algorithm.grpo.algorithm import GRPO  # noqa: E402
from rollouthub.testing.tiny_lm import build_tiny_lm  # noqa: E402

from .settings import DEMO_SETTINGS, DemoSettings  # noqa: E402
from .task import _words, eval_tasks  # noqa: E402

__all__ = ["demo_datasets", "build_demo_grpo", "run_on_stack"]


def demo_datasets(settings: DemoSettings = DEMO_SETTINGS) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The rollout inputs: every word of the training split, and the held-out evaluation words."""
    train = [{"word": word} for word in _words("train")]
    val = [task.to_input() for task in eval_tasks(settings.eval_size)]
    return train, val


def build_demo_grpo(seed: int, settings: DemoSettings = DEMO_SETTINGS, **options: Any) -> GRPO:
    """A :class:`GRPO` training a freshly built demo model (seeded) with the demo's settings; ``options`` go to
    :class:`GRPO` (``max_steps``, ``checkpoint_dir``, ``resume``, ``stop_at``, ``on_step``...) and a ``config``
    override dict to :meth:`DemoSettings.grpo_config`."""
    torch.manual_seed(seed)
    model, tokenizer = build_tiny_lm(seed=seed, **settings.model_sizes())
    config = settings.grpo_config(seed, **options.pop("config", {}))
    defaults: Dict[str, Any] = {
        "inputs_per_step": settings.inputs_per_step,
        "eval_every": settings.eval_every,
        "resource_name": "llm",
        "run_id": None,
    }
    return GRPO(model, tokenizer, config, **{**defaults, **options})


def run_on_stack(
    store_url: str,
    grpo: GRPO,
    *,
    n_runners: int = 4,
    settings: DemoSettings = DEMO_SETTINGS,
    train_dataset: Optional[List[Dict[str, Any]]] = None,
    progress: bool = True,
    llm_proxy: Any = None,
    agent: Any = None,
    val_dataset: Optional[List[Dict[str, Any]]] = None,
) -> GRPO:
    """Train ``grpo`` with ``n_runners`` runner processes against the store server at ``store_url``; returns it
    (its :attr:`~GRPO.summary` and :attr:`~GRPO.records` hold the results); ``progress``: the Trainer's progress
    line; ``llm_proxy``: the Trainer's LLM proxy (GRPO then serves the policy through it instead of its own);
    ``agent``: the agent the runners run (default: the demo's ``last_letter_agent``); the datasets default to the
    demo's."""
    from rollouthub.rl_demo.agent import last_letter_agent
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.tracer import OtelTracer
    from rollouthub.trainer import Trainer

    train, val = demo_datasets(settings)
    trainer = Trainer(
        algorithm=grpo,
        n_runners=n_runners,
        store=LightningStoreClient(store_url),
        strategy={"type": "cs", "managed_store": False, "n_runners": n_runners},
        # The proxy records the LLM calls; the runner adds the reward span. No agent instrumentation is needed.
        tracer=OtelTracer(),
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 5.0},
        progress=progress,
        llm_proxy=llm_proxy,
    )
    trainer.fit(agent or last_letter_agent, train_dataset=train_dataset or train, val_dataset=val_dataset or val)
    return grpo
