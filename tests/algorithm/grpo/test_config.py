"""GRPOConfig: defaults, one-line errors naming the field, JSON round trip (no torch needed)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from rollouthub.algorithm.grpo import GRPOConfig


def test_defaults_are_valid_and_round_trip_through_json() -> None:
    config = GRPOConfig(lora_rank=8, adam_betas=(0.9, 0.95), extra={"task": "demo"})
    values = json.loads(json.dumps(config.to_dict()))
    assert GRPOConfig.from_dict(values) == config
    assert GRPOConfig().advantage == "mean_std" and GRPOConfig().kl_coef == 0.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_size": 1}, "GRPOConfig.group_size must be an integer >= 2: got 1"),
        ({"group_size": True}, "GRPOConfig.group_size must be an integer >= 2: got True"),
        ({"temperature": 0}, "GRPOConfig.temperature must be > 0: got 0"),
        ({"temperature": float("nan")}, "GRPOConfig.temperature must be a finite number: got nan"),
        ({"advantage": "std"}, "GRPOConfig.advantage must be one of mean_std, mean, leave_one_out: got 'std'"),
        ({"clip_low": 1.0}, "GRPOConfig.clip_low must be in [0, 1): got 1.0"),
        ({"clip_high": -0.1}, "GRPOConfig.clip_high must be >= 0: got -0.1"),
        ({"kl_coef": -1}, "GRPOConfig.kl_coef must be >= 0: got -1"),
        ({"learning_rate": 0}, "GRPOConfig.learning_rate must be > 0: got 0"),
        ({"learning_rate": "1e-5"}, "GRPOConfig.learning_rate must be a finite number: got '1e-5'"),
        ({"adam_betas": (0.9,)}, "GRPOConfig.adam_betas must be a pair of numbers in [0, 1): got (0.9,)"),
        ({"adam_betas": (0.9, 1.0)}, "GRPOConfig.adam_betas must be a pair of numbers in [0, 1): got (0.9, 1.0)"),
        ({"mini_batch_size": 0}, "GRPOConfig.mini_batch_size must be an integer >= 1: got 0"),
        ({"micro_batch_size": 2.5}, "GRPOConfig.micro_batch_size must be an integer >= 1: got 2.5"),
        ({"epochs": 0}, "GRPOConfig.epochs must be an integer >= 1: got 0"),
        ({"lora_rank": -1}, "GRPOConfig.lora_rank must be an integer >= 0: got -1"),
        ({"lora_target_modules": "q_proj"}, "GRPOConfig.lora_target_modules must be a non-empty list"),
        ({"device": "gpu"}, "GRPOConfig.device must be auto, cpu, cuda or cuda:N: got 'gpu'"),
        ({"device": "cpu", "dtype": "bfloat16"}, "GRPOConfig.dtype must be float32 or auto on the CPU"),
        ({"dtype": "float16"}, "GRPOConfig.dtype must be one of auto, float32, bfloat16: got 'float16'"),
        ({"checkpoint_every": -1}, "GRPOConfig.checkpoint_every must be an integer >= 0: got -1"),
        ({"keep_checkpoints": 0}, "GRPOConfig.keep_checkpoints must be an integer >= 1: got 0"),
    ],
)
def test_a_bad_value_is_a_one_line_error_naming_the_field(options: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        GRPOConfig(**options)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_an_unknown_option_read_back_is_named() -> None:
    with pytest.raises(ValueError, match="^GRPOConfig has no option 'learning_rte'$"):
        GRPOConfig.from_dict({"learning_rte": 1e-5})


def test_importing_the_algorithms_and_the_config_does_not_import_torch() -> None:
    import subprocess

    code = (
        "import sys, rollouthub.algorithm, rollouthub.algorithm.grpo as g; g.GRPOConfig(); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    "statement",
    [
        "from rollouthub.algorithm.grpo import PolicyUpdater",
        "import rollouthub.algorithm.grpo.loss",
        "from rollouthub.algorithm.grpo import save_checkpoint",
        "import rollouthub.rl_demo.sampling",
    ],
)
def test_without_torch_the_torch_parts_say_which_extra_to_install_in_one_line(statement: str) -> None:
    """Runs in both legs: the child process hides torch (``sys.modules['torch'] = None`` makes importing it fail)."""
    import subprocess

    code = (
        "import sys\nsys.modules['torch'] = None\n"
        "from rollouthub.utils.extras import MissingExtraError\n"
        f"try:\n    {statement}\nexcept MissingExtraError as error:\n    print(str(error))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    assert "pip install 'rollouthub[train]'" in lines[0] and "'torch'" in lines[0]
