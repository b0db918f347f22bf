"""Load export files the way a TRL user does, in one process (run by ``test_trl_loading.py`` under several
``PYTHONHASHSEED`` values): ``datasets`` loaders, then ``trl.data_utils.is_conversational`` and
``maybe_apply_chat_template`` (with the tiny chat-template tokenizer) on every example.

``trajectories`` rows are token ids, not chat messages (TRL has no dataset type for them): their id and mask columns
must load as integer sequences (and as integer tensors in the ``torch`` format an RL loop reads), the mask must be 1
exactly on the sampled calls' ranges with log-probabilities (when served) 0.0 elsewhere, and the ids must decode with the mock
engine's tokenizer (UTF-8 bytes). For a store served with the tiny model's chat template (``"chat_template": true``),
the decoded ids must be what TRL renders for the same conversation (the ``messages`` export of that store, named by
``"conversations"``): the prompt, the whole conversation, and each sampled answer followed by the end-of-turn token.

Usage: ``python trl_load_check.py MANIFEST.json``; the manifest lists ``{"path", "format", "file_format"}`` entries
(``trajectories`` entries also ``"conversations"`` and ``"chat_template"``). Prints one JSON object: per entry and
loader, the number of examples and a digest of the rendered (or decoded) texts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, Dict, List, Optional

EXPECTED_KEYS = {
    "messages": {"text"},
    "triplets": {"prompt", "completion"},
    "preferences": {"prompt", "chosen", "rejected"},
}
"""The keys ``maybe_apply_chat_template`` returns for each export format (TRL's dataset types)."""


def _loaders(path: str, file_format: str) -> Dict[str, Any]:
    from datasets import Dataset, load_dataset

    if file_format == "jsonl":
        return {
            "Dataset.from_json": lambda: Dataset.from_json(path),
            "load_dataset(json)": lambda: load_dataset("json", data_files=path, split="train"),
        }
    return {
        "Dataset.from_parquet": lambda: Dataset.from_parquet(path),
        "load_dataset(parquet)": lambda: load_dataset("parquet", data_files=path, split="train"),
    }


def _render(example: Dict[str, Any], format: str, tokenizer: Any) -> str:
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    if not is_conversational(example):
        raise AssertionError(f"not conversational: {example}")
    rendered = maybe_apply_chat_template(example, tokenizer)
    keys = EXPECTED_KEYS[format]
    if not keys <= set(rendered) or not all(isinstance(rendered[k], str) and rendered[k] for k in keys):
        raise AssertionError(f"{format}: rendered {sorted(rendered)} from {example}")
    if format == "triplets" and not rendered["prompt"].endswith("<|assistant|>"):
        raise AssertionError(f"the prompt does not end with the generation prompt: {rendered['prompt']!r}")
    if format == "preferences":
        if rendered["chosen"] == rendered["rejected"]:
            raise AssertionError(f"chosen and rejected render the same: {example}")
        if not rendered["prompt"].endswith("<|assistant|>"):
            raise AssertionError(f"the prompt does not end with the generation prompt: {rendered['prompt']!r}")
    return json.dumps({k: rendered[k] for k in sorted(keys)}, sort_keys=True)


TOKEN_COLUMNS = ("prompt_ids", "response_ids", "response_mask")
"""The integer columns of ``trajectories`` rows."""


def _value_dtype(feature: Any) -> str:
    """The dtype of a sequence feature's items (``List`` / ``Sequence`` of ``Value``), else ``""``."""
    inner = getattr(feature, "feature", None)
    return str(getattr(inner, "dtype", ""))


def _check_trajectory_features(dataset: Any) -> None:
    """Integer id and mask columns (tensors of integers in the ``torch`` format), float log-probabilities."""
    import torch

    for column in TOKEN_COLUMNS:
        if not _value_dtype(dataset.features[column]).startswith("int"):
            raise AssertionError(f"{column} loads as {dataset.features[column]}, not a sequence of integers")
    logprobs = dataset.features["response_logprobs"]
    if any(row is not None for row in dataset["response_logprobs"]) and _value_dtype(logprobs) != "float64":
        raise AssertionError(f"response_logprobs loads as {logprobs}")
    for example in dataset.with_format("torch", columns=list(TOKEN_COLUMNS)):
        tensors = [example[column] for column in TOKEN_COLUMNS]
        if any(t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool for t in tensors):
            raise AssertionError(f"not 1-d integer tensors: {[t.dtype for t in tensors]}")
        if tensors[1].shape != tensors[2].shape:
            raise AssertionError("response_ids and response_mask differ in length")


def _decode(ids: List[int]) -> str:
    """The mock engine's detokenization: token ids are the UTF-8 bytes of the text."""
    return bytes(ids).decode("utf-8")


def _trajectory(example: Dict[str, Any], conversation: Optional[List[Dict[str, Any]]], tokenizer: Any) -> str:
    """Check one ``trajectories`` row (against TRL's rendering of its ``conversation`` when given); its decoded form."""
    from trl.data_utils import maybe_apply_chat_template

    response, mask, logprobs = example["response_ids"], example["response_mask"], example["response_logprobs"]
    sampled = [0] * len(response)
    for start, end in example["call_ranges"]:
        sampled[start:end] = [1] * (end - start)
    if list(mask) != sampled:
        raise AssertionError(f"the mask is not 1 exactly on the calls' ranges: {example}")
    if logprobs is not None and (
        len(logprobs) != len(mask) or any(lp != 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    ):
        raise AssertionError(f"log-probabilities not one per token, 0.0 on the spliced tokens: {example}")
    prompt, whole = _decode(example["prompt_ids"]), _decode(example["prompt_ids"] + response)
    answers = [_decode(response[start:end]) for start, end in example["call_ranges"]]
    if conversation is not None:
        first_answer = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
        rendered_prompt = maybe_apply_chat_template({"prompt": conversation[:first_answer]}, tokenizer)["prompt"]
        rendered_text = maybe_apply_chat_template({"messages": conversation}, tokenizer)["text"]
        said = [m["content"] + tokenizer.eos_token for m in conversation if m["role"] == "assistant"]
        if (prompt, whole, answers) != (rendered_prompt, rendered_text, said):
            raise AssertionError(
                f"ids decode to {(prompt, whole, answers)}, TRL renders {(rendered_prompt, rendered_text, said)}"
            )
    return json.dumps({"text": whole, "answers": answers, "mask": list(mask), "logprobs": logprobs})


def _conversations(entry: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    """rollout id → chat messages, from the ``messages`` export named by a chat-template ``trajectories`` entry."""
    if not entry.get("chat_template"):
        return {}
    with open(entry["conversations"]) as handle:
        rows = [json.loads(line) for line in handle]
    return {row["rollout_id"]: row["messages"] for row in rows}


def main(manifest_path: str) -> None:
    """Check every entry of the manifest; print the results as JSON."""
    import datasets

    from rollouthub.testing.tiny_lm import build_tokenizer

    datasets.disable_progress_bars()
    tokenizer = build_tokenizer()
    with open(manifest_path) as handle:
        entries: List[Dict[str, str]] = json.load(handle)
    results: Dict[str, Dict[str, Any]] = {}
    for entry in entries:
        conversations = _conversations(entry) if entry["format"] == "trajectories" else {}
        for name, load in _loaders(entry["path"], entry["file_format"]).items():
            dataset = load()
            digest = hashlib.sha256()
            if entry["format"] == "trajectories":
                _check_trajectory_features(dataset)
            for example in dataset:
                if entry["format"] == "trajectories":
                    conversation = conversations[example["rollout_id"]] if entry.get("chat_template") else None
                    rendered = _trajectory(example, conversation, tokenizer)
                else:
                    rendered = _render(example, entry["format"], tokenizer)
                digest.update(rendered.encode())
            results[f"{entry['path']} {name}"] = {"examples": len(dataset), "digest": digest.hexdigest()}
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
