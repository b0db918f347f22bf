"""VERL integration: reinforcement learning on GPUs with VERL, vLLM and Ray -- the interface only.

rollouthub does not ship the VERL driver. Constructing :class:`VERL` without VERL's dependencies raises a clear
``ImportError``; with them installed, :meth:`VERL.run` raises a ``RuntimeError``. Reinforcement learning of the
agent's model runs with :class:`rollouthub.algorithm.grpo.GRPO` (the ``[train]`` extra: torch and transformers, on a
CPU or a CUDA GPU; vLLM can serve the policy behind the LLM proxy instead of the local backend, see docs/rl.md).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Dict, List, Optional

from ..base import Algorithm, Dataset

__all__ = ["VERL", "VERL_REQUIREMENTS", "missing_verl_dependencies"]

VERL_REQUIREMENTS = ("verl", "vllm", "torch", "ray", "hydra", "transformers")
"""Import names of the packages the VERL integration needs."""

DEFAULT_AGENTLIGHTNING_CONFIG: Dict[str, Any] = {
    "port": 9999,
    "trace_aggregator": {
        "level": "transition",
        "trajectory_max_prompt_length": 2048,
        "trajectory_max_response_length": 8192,
        "debug": False,
        "mismatch_log_dir": "./mismatch_cases",
    },
}
"""The ``agentlightning`` section added to VERL's ``ppo_trainer`` configuration."""


def missing_verl_dependencies() -> List[str]:
    """Return the import names of VERL's dependencies that are not installed."""
    return [name for name in VERL_REQUIREMENTS if importlib.util.find_spec(name) is None]


class VERL(Algorithm):
    """PPO/GRPO training of the agent's LLM with VERL (GPU only).

    Args:
        config: a VERL configuration dict merged over the packaged defaults.
        trainer_cls: optional custom VERL trainer class.
        daemon_cls: optional custom agent-mode daemon class.

    Raises:
        ImportError: if ``verl``, ``vllm``, ``torch``, ``ray``, ``hydra-core`` or ``transformers`` is missing.
    """

    def __init__(self, config: Dict[str, Any], trainer_cls: Optional[type] = None, daemon_cls: Optional[type] = None):
        missing = missing_verl_dependencies()
        if missing:
            raise ImportError(
                "The VERL algorithm needs CUDA GPUs and the packages "
                f"{', '.join(VERL_REQUIREMENTS)}; missing: {', '.join(missing)}. "
                "Install them (e.g. `pip install verl vllm`) on a GPU machine, or train with "
                "rollouthub.algorithm.grpo.GRPO (pip install 'rollouthub[train]'; CPU or CUDA)."
            )
        self.config = config
        self.trainer_cls = trainer_cls
        self.daemon_cls = daemon_cls

    def run(self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None) -> None:
        """Not available: rollouthub does not ship the VERL driver (``RuntimeError``)."""
        raise RuntimeError(
            "rollouthub provides the VERL interface only; the VERL training driver (run_ppo with the agent-mode "
            "daemon) is not implemented. Use rollouthub.algorithm.grpo.GRPO (torch + transformers, CPU or CUDA)."
        )

    def get_client(self) -> Any:
        """Deprecated v0.1 accessor; always raises ``NotImplementedError``."""
        raise NotImplementedError("get_client() is deprecated.")
