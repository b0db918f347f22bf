"""Checkpoints of a GRPO run: saved atomically every N steps, and ``resume`` from the latest complete one.

A checkpoint is a directory ``step-00000010`` under the run's checkpoint directory holding:

- ``model/``: the full model (``config.json`` + ``model.safetensors``, loadable with ``from_pretrained``), or the
  LoRA adapter only (peft's ``adapter_config.json`` + ``adapter_model.safetensors``);
- ``optimizer.pt``: the AdamW state; ``rng.pt``: the Python, torch (and CUDA) random states and the updater's
  mini-batch shuffling generator;
- ``state.json``: step, policy version, the ids of every rollout trained on so far, the configuration, free-form
  ``extra`` values;
- ``manifest.json``, written last: every other file with its size.

It is written in a hidden temporary directory next to it, then renamed into place (atomic on one file system): a
crash mid-save leaves a ``.tmp-*`` directory that :func:`latest_checkpoint` ignores, as it ignores any directory
whose manifest is missing or does not match its files.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="GRPO checkpoints")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from .config import GRPOConfig  # noqa: E402
from .update import PolicyUpdater  # noqa: E402

__all__ = ["TrainingState", "save_checkpoint", "latest_checkpoint", "load_checkpoint", "resume"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d{8})$")
_FORMAT = 1


@dataclass
class TrainingState:
    """What a checkpoint records besides tensors."""

    step: int
    """Updates completed."""
    policy_version: int
    """The policy version the saved weights are (published as resources after the update)."""
    trained_rollout_ids: List[str] = field(default_factory=list)
    """Every rollout trained on so far, in order (a resumed run must not train on them again)."""
    config: Dict[str, Any] = field(default_factory=dict)
    """The :class:`GRPOConfig` of the run, as :meth:`GRPOConfig.to_dict`."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Free-form JSON values of the caller (e.g. the data cursor)."""


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def _save_model(model: Any, directory: Path) -> None:
    if _is_peft(model):
        model.save_pretrained(str(directory))
        return
    safetensors = import_extra("safetensors.torch", extra="train", feature="GRPO checkpoints", package="safetensors")
    directory.mkdir(parents=True)
    model.config.save_pretrained(str(directory))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(directory))
    # save_model writes tensors that share storage (tied embeddings) once; the "pt" format tag lets
    # transformers' from_pretrained read the file.
    safetensors.save_model(model, str(directory / "model.safetensors"), metadata={"format": "pt"})


def _load_model(model: Any, directory: Path) -> None:
    if _is_peft(model):
        peft_utils = import_extra("peft.utils", extra="lora", feature="GRPO with lora_rank > 0", package="peft")
        peft_utils.set_peft_model_state_dict(model, peft_utils.load_peft_weights(str(directory)))
        return
    safetensors = import_extra("safetensors.torch", extra="train", feature="GRPO checkpoints", package="safetensors")
    missing, unexpected = safetensors.load_model(model, str(directory / "model.safetensors"), strict=True)
    # Tied weights are stored once; anything else missing or unexpected is a checkpoint of another model.
    tied = {name for name in missing if name.endswith("lm_head.weight")} if model.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"checkpoint {directory} does not fit the model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )


def _rng_state(updater: PolicyUpdater) -> Dict[str, Any]:
    state: Dict[str, Any] = {
        "python": random.getstate(),
        "torch": torch.random.get_rng_state(),
        "generator": updater.generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(updater: PolicyUpdater, state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.random.set_rng_state(state["torch"])
    updater.generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _files(directory: Path) -> Dict[str, int]:
    return {
        str(path.relative_to(directory)): path.stat().st_size
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != "manifest.json"
    }


def _fsync_tree(directory: Path) -> None:
    for path in [*directory.rglob("*"), directory]:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def save_checkpoint(
    directory: Union[str, Path], updater: PolicyUpdater, state: TrainingState, *, keep: Optional[int] = None
) -> Path:
    """Write a checkpoint of ``updater`` at ``state.step`` into ``directory`` atomically; returns its path.

    Keeps the ``keep`` newest complete checkpoints (default: ``updater.config.keep_checkpoints``) and deletes
    older ones, and the leftovers of interrupted saves, once the new one is in place.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step:08d}"
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-step-{state.step:08d}-", dir=root))
    try:
        _save_model(updater.model, staging / "model")
        torch.save(updater.optimizer.state_dict(), staging / "optimizer.pt")
        torch.save(_rng_state(updater), staging / "rng.pt")
        values = {
            "format": _FORMAT,
            "step": state.step,
            "policy_version": state.policy_version,
            "trained_rollout_ids": list(state.trained_rollout_ids),
            "config": state.config or updater.config.to_dict(),
            "extra": state.extra,
        }
        (staging / "state.json").write_text(json.dumps(values))
        (staging / "manifest.json").write_text(json.dumps({"format": _FORMAT, "files": _files(staging)}))
        _fsync_tree(staging)
        if final.exists():  # the same step saved again (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _prune(root, keep if keep is not None else updater.config.keep_checkpoints)
    return final


def _prune(root: Path, keep: int) -> None:
    complete = sorted(path for path in root.iterdir() if _NAME.match(path.name) and _problem(path) is None)
    for path in complete[: max(len(complete) - keep, 0)]:
        shutil.rmtree(path, ignore_errors=True)
    for path in root.glob(".tmp-step-*"):
        shutil.rmtree(path, ignore_errors=True)


def _problem(path: Path) -> Optional[str]:
    """Why ``path`` is not a complete checkpoint, or ``None`` when it is."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        return "no manifest.json (an interrupted save)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest.json ({exc})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or "state.json" not in files:
        return "manifest.json lists no state.json"
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, the manifest says {size}"
    return None


def latest_checkpoint(directory: Union[str, Path]) -> Optional[Path]:
    """The complete checkpoint with the highest step under ``directory`` (``None`` if there is none).

    Incomplete ones (interrupted saves, missing or truncated files) are skipped with a warning naming why.
    """
    root = Path(directory)
    if not root.is_dir():
        return None
    for path in sorted((path for path in root.iterdir() if _NAME.match(path.name)), reverse=True):
        problem = _problem(path)
        if problem is None:
            return path
        logger.warning("Ignoring checkpoint %s: %s", path, problem)
    return None


def load_checkpoint(path: Union[str, Path], updater: PolicyUpdater) -> TrainingState:
    """Restore weights (or adapter), optimizer, random states and step of ``updater`` from ``path``."""
    checkpoint = Path(path)
    problem = _problem(checkpoint)
    if problem is not None:
        raise ValueError(f"{checkpoint} is not a complete checkpoint: {problem}")
    values = json.loads((checkpoint / "state.json").read_text())
    saved_config = GRPOConfig.from_dict(values["config"])
    if (saved_config.lora_rank > 0) != (updater.config.lora_rank > 0):
        raise ValueError(
            f"{checkpoint} holds a {'LoRA adapter' if saved_config.lora_rank else 'full model'}; "
            f"the updater trains a {'LoRA adapter' if updater.config.lora_rank else 'full model'}"
        )
    _load_model(updater.model, checkpoint / "model")
    updater.optimizer.load_state_dict(
        torch.load(checkpoint / "optimizer.pt", map_location=updater.device, weights_only=True)
    )
    _restore_rng(updater, torch.load(checkpoint / "rng.pt", weights_only=True))
    updater.step = int(values["step"])
    return TrainingState(
        step=int(values["step"]),
        policy_version=int(values["policy_version"]),
        trained_rollout_ids=list(values["trained_rollout_ids"]),
        config=values["config"],
        extra=dict(values.get("extra") or {}),
    )


def resume(directory: Union[str, Path], updater: PolicyUpdater) -> Optional[TrainingState]:
    """Load the latest complete checkpoint under ``directory`` into ``updater``; ``None`` when there is none."""
    path = latest_checkpoint(directory)
    if path is None:
        return None
    logger.info("Resuming from %s", path)
    return load_checkpoint(path, updater)
