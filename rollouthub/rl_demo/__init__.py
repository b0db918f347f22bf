"""The reinforcement-learning demo: a task a tiny model built locally learns with GRPO on a CPU, without downloads.

- :mod:`.task` (no torch): the task (reply with the last letter of a word), its reward, the train and held-out
  splits;
- :mod:`.settings` (no torch): the model sizes and hyperparameters (:data:`DEMO_SETTINGS`);
- :mod:`.sampling` and :mod:`.direct` (``[train]`` extra): sampling from the model directly and the demo's loop
  without the stack, the reference learning curve (``benchmarks/grpo_learning.py``);
- :mod:`.agent` (no torch): the demo agent, which calls the policy through the LLM proxy;
- :mod:`.stack` (``[train]`` extra): the demo through the full stack with :class:`~rollouthub.algorithm.grpo.GRPO`
  (``python -m rollouthub.quickstart --rl``, ``benchmarks/rl_step.py``).
"""

from __future__ import annotations

from .settings import DEMO_SETTINGS, DemoSettings
from .task import DemoTask, eval_tasks, reward, train_tasks

__all__ = ["DEMO_SETTINGS", "DemoSettings", "DemoTask", "eval_tasks", "reward", "train_tasks"]
