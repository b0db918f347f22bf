"""GRPO checkpoints: a round trip restores weights, optimizer, step and random states; partial ones are ignored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.algorithm.grpo.test_update import sampled_step
from tests.train_stack import TRAIN_ONLY

pytestmark = TRAIN_ONLY


def _updater(seed: int = 0, **options: Any) -> Any:
    from rollouthub.algorithm.grpo import GRPOConfig, PolicyUpdater
    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, _ = build_tiny_lm(seed=seed)
    settings = {"learning_rate": 1e-2, "device": "cpu", "mini_batch_size": 6, "micro_batch_size": 3, **options}
    return PolicyUpdater(model, GRPOConfig(**settings))


def _tokenizer() -> Any:
    from rollouthub.testing.tiny_lm import build_tokenizer

    return build_tokenizer()


def _same_tensors(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_tensors(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_round_trip_restores_weights_optimizer_step_and_randomness(tmp_path: Path, lora_rank: int) -> None:
    import torch

    from rollouthub.algorithm.grpo import TrainingState, load_checkpoint, save_checkpoint

    tokenizer = _tokenizer()
    trained = _updater(lora_rank=lora_rank)
    trained.update(sampled_step(trained.model, tokenizer, seed=1))
    trained.update(sampled_step(trained.model, tokenizer, seed=2))
    state = TrainingState(step=2, policy_version=2, trained_rollout_ids=["a", "b"], extra={"cursor": 7})
    path = save_checkpoint(tmp_path, trained, state)
    assert path.name == "step-00000002"
    files = {p.name for p in (path / "model").iterdir()}
    assert ("adapter_model.safetensors" in files) == bool(lora_rank)
    assert ("model.safetensors" in files) == (not lora_rank)

    restored = _updater(seed=5, lora_rank=lora_rank)  # other initial weights: everything must come from the file
    loaded = load_checkpoint(path, restored)
    assert (loaded.step, loaded.policy_version, loaded.trained_rollout_ids, loaded.extra) == (
        2,
        2,
        ["a", "b"],
        {"cursor": 7},
    )
    assert loaded.config["lora_rank"] == lora_rank and restored.step == 2
    if lora_rank:  # the base weights are not in an adapter checkpoint: compare the adapter
        pick = {n: p for n, p in trained.model.named_parameters() if p.requires_grad}
        assert _same_tensors(pick, {n: p for n, p in restored.model.named_parameters() if p.requires_grad})
    else:
        assert _same_tensors(trained.model.state_dict(), restored.model.state_dict())
    assert _same_tensors(trained.optimizer.state_dict()["state"], restored.optimizer.state_dict()["state"])
    assert torch.equal(trained.generator.get_state(), restored.generator.get_state())

    # Both continue identically: same samples (same global RNG state), same shuffling, same optimizer moments.
    if lora_rank:
        restored = trained  # the base weights differ by construction: continuing is checked on full models
    else:
        torch.manual_seed(11)
        a = trained.update(sampled_step(trained.model, tokenizer, seed=3))
        b = restored.update(sampled_step(restored.model, tokenizer, seed=3))
        assert a.loss == b.loss and a.step == b.step == 3
        assert _same_tensors(trained.model.state_dict(), restored.model.state_dict())


def test_a_saved_full_model_loads_with_from_pretrained(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from rollouthub.algorithm.grpo import TrainingState, save_checkpoint

    updater = _updater()
    updater.update(sampled_step(updater.model, _tokenizer()))
    path = save_checkpoint(tmp_path, updater, TrainingState(step=1, policy_version=1))
    loaded = AutoModelForCausalLM.from_pretrained(path / "model")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, updater.model(ids).logits, atol=1e-6)


def test_resume_takes_the_latest_complete_checkpoint_and_ignores_partial_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rollouthub.algorithm.grpo import TrainingState, latest_checkpoint, resume, save_checkpoint

    updater = _updater()
    assert resume(tmp_path / "none", updater) is None
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, updater, TrainingState(step=step, policy_version=step), keep=5)
    # step 4: a file truncated after the save; step 3: the manifest missing (as if the rename never happened);
    # a leftover staging directory of an interrupted save of step 5.
    optimizer = tmp_path / "step-00000004" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:10])
    (tmp_path / "step-00000003" / "manifest.json").unlink()
    shutil.copytree(tmp_path / "step-00000002", tmp_path / ".tmp-step-00000005-x")
    with caplog.at_level("WARNING"):
        assert latest_checkpoint(tmp_path) == tmp_path / "step-00000002"
    assert "optimizer.pt has 10 bytes" in caplog.text and "no manifest.json" in caplog.text
    fresh = _updater(seed=3)
    state = resume(tmp_path, fresh)
    assert state is not None and state.step == 2 and fresh.step == 2
    with pytest.raises(ValueError, match="is not a complete checkpoint: no manifest.json"):
        from rollouthub.algorithm.grpo import load_checkpoint

        load_checkpoint(tmp_path / "step-00000003", fresh)


def test_only_the_newest_checkpoints_are_kept_and_staging_leftovers_are_removed(tmp_path: Path) -> None:
    from rollouthub.algorithm.grpo import TrainingState, save_checkpoint

    updater = _updater(keep_checkpoints=2)
    (tmp_path / ".tmp-step-00000009-crashed").mkdir(parents=True)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, updater, TrainingState(step=step, policy_version=step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002", "step-00000003"]
    manifest = json.loads((tmp_path / "step-00000003" / "manifest.json").read_text())
    assert {"state.json", "optimizer.pt", "rng.pt"} <= set(manifest["files"])


def test_a_checkpoint_of_a_full_model_does_not_load_into_a_lora_updater(tmp_path: Path) -> None:
    from rollouthub.algorithm.grpo import TrainingState, load_checkpoint, save_checkpoint

    path = save_checkpoint(tmp_path, _updater(), TrainingState(step=1, policy_version=1))
    with pytest.raises(ValueError, match="holds a full model; the updater trains a LoRA adapter"):
        load_checkpoint(path, _updater(lora_rank=4))


SAVER = """
import sys
from rollouthub.algorithm.grpo import GRPOConfig, PolicyUpdater, TrainingState, save_checkpoint
from rollouthub.testing.tiny_lm import build_tiny_lm

updater = PolicyUpdater(build_tiny_lm(seed=0)[0], GRPOConfig(device="cpu"))
step = 0
while True:
    step += 1
    save_checkpoint(sys.argv[1], updater, TrainingState(step=step, policy_version=step, trained_rollout_ids=[f"r{step}"]))
    print(f"saved {step}", flush=True)
"""


@pytest.mark.parametrize("kill_after", [2, 5])
def test_a_saver_killed_mid_save_leaves_a_loadable_latest_checkpoint(tmp_path: Path, kill_after: int) -> None:
    """A real process saving checkpoints back to back gets SIGKILL right after its ``kill_after``-th save, i.e.
    somewhere inside the next one: resume finds a complete checkpoint and loads it."""
    import os
    import signal
    import subprocess
    import sys

    from rollouthub.algorithm.grpo import latest_checkpoint, resume

    process = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == f"saved {kill_after}":
                break
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    latest = latest_checkpoint(tmp_path)
    assert latest is not None
    state = resume(tmp_path, _updater(seed=9))
    assert state is not None and state.step >= kill_after
    assert state.trained_rollout_ids == [f"r{state.step}"] and state.policy_version == state.step
