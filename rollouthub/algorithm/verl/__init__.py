"""VERL integration (runtime.md 10.6): reinforcement learning on GPUs with VERL, vLLM and Ray.

This is the interface only: the CPU-only core does not ship the VERL driver. Constructing :class:`VERL` without
VERL's dependencies raises a clear ``ImportError``; with them installed, :meth:`VERL.run` raises a
``RuntimeError`` explaining that the GPU driver is not part of rollouthub yet.
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
                "Install them (e.g. `pip install verl vllm`) on a GPU machine, or use APO / a custom @algo on CPU."
            )
        self.config = config
        self.trainer_cls = trainer_cls
        self.daemon_cls = daemon_cls

    def run(self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None) -> None:
        """Not available: rollouthub does not ship the VERL driver (``RuntimeError``)."""
        raise RuntimeError(
            "rollouthub provides the VERL interface only; the GPU training driver (run_ppo with the agent-mode "
            "daemon) is not implemented in this release."
        )

    def get_client(self) -> Any:
        """Deprecated v0.1 accessor; always raises ``NotImplementedError``."""
        raise NotImplementedError("get_client() is deprecated.")
