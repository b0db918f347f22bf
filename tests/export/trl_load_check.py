"""Load export files the way a TRL user does, in one process (run by ``test_trl_loading.py`` under several
``PYTHONHASHSEED`` values): ``datasets`` loaders, then ``trl.data_utils.is_conversational`` and
``maybe_apply_chat_template`` (with the tiny chat-template tokenizer) on every example.

Usage: ``python trl_load_check.py MANIFEST.json``; the manifest lists ``{"path", "format", "file_format"}`` entries.
Prints one JSON object: per entry and loader, the number of examples and a digest of the rendered texts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, Dict, List

EXPECTED_KEYS = {
    "messages": {"text"},
    "triplets": {"prompt", "completion"},
    "preferences": {"prompt", "chosen", "rejected"},
    # issue 31's "trajectories" rows carry token ids, not chat messages: they get their own check when they land.
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
        for name, load in _loaders(entry["path"], entry["file_format"]).items():
            dataset = load()
            digest = hashlib.sha256()
            for example in dataset:
                digest.update(_render(example, entry["format"], tokenizer).encode())
            results[f"{entry['path']} {name}"] = {"examples": len(dataset), "digest": digest.hexdigest()}
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
