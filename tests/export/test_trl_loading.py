"""The SFT (``messages``), RL (``triplets``) and DPO (``preferences``) exports load with HF ``datasets`` and pass TRL's
data utilities -- ``is_conversational`` and ``maybe_apply_chat_template`` with a tokenizer that has a chat template --
under ``PYTHONHASHSEED`` 0 to 7 (``is_conversational`` inspects whichever chat field a set yields first). The
token-level ``trajectories`` load with ``datasets`` too, as integer ids and masks, and decode to what TRL renders for
the same conversations when the store was served with the tiny model's chat template.

Stores: the APO quickstart's (its mock model answers one prompt the same way every time, so it holds no preference
pair: that export is checked to be empty and to say why), the tool-calling agent's and the prompt-versions agent's
(both hold real pairs, so the DPO check is not vacuous), and a two-turn chat agent's served with the chat-template
tokenization and log-probabilities (one merged trajectory per rollout, spliced user turn masked). Each seed runs in
its own process (``trl_load_check.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from rollouthub.export import export

from ..train_stack import TRAIN_ONLY
from .conftest import PromptsDb

pytestmark = [*TRAIN_ONLY, pytest.mark.timeout(900)]

FORMATS = ("messages", "triplets", "preferences", "trajectories")
"""Every format a trainer reads: conversations in TRL's layouts, and token-level trajectories."""

EMPTY = {
    ("quickstart", "preferences"): "(no input has two answers to one prompt with different rewards)",
    ("prompts", "trajectories"): "skipped 5: 5 no LLM call with token ids",  # its agent asks for no token ids
}
"""The exports that hold no row, and what their summary says."""

CHAT_TEMPLATE_STORES = {"chat"}
"""Stores whose token ids are the UTF-8 bytes of the tiny model's chat template (their trajectories are checked
against TRL's rendering of the ``messages`` rows)."""

SEEDS = range(8)
CHECKER = Path(__file__).with_name("trl_load_check.py")


def _export_all(stores: Dict[str, Path], directory: Path) -> List[Dict[str, Any]]:
    """Export every format of every store as JSON Lines and Parquet; the manifest of the non-empty files."""
    manifest: List[Dict[str, Any]] = []
    for store, db in stores.items():
        for kind in FORMATS:
            for file_format, extension in (("jsonl", "jsonl"), ("parquet", "parquet")):
                path = directory / f"{store}-{kind}.{extension}"
                summary = export(kind, str(path), database=str(db))
                if summary.rows == 0:
                    # datasets loads no empty file (it infers the columns from the rows): only these are empty, for
                    # the reason the summary gives.
                    assert (store, kind) in EMPTY, summary.describe()
                    assert EMPTY[store, kind] in summary.describe()
                    continue
                entry: Dict[str, Any] = {
                    "path": str(path),
                    "format": kind,
                    "file_format": file_format,
                    "rows": summary.rows,
                }
                if kind == "trajectories":
                    if store in CHAT_TEMPLATE_STORES:  # one trajectory per rollout, every call with ids and logprobs
                        assert summary.rows == summary.rollouts_selected and not summary.notes, summary.describe()
                    entry["conversations"] = str(directory / f"{store}-messages.jsonl")
                    entry["chat_template"] = store in CHAT_TEMPLATE_STORES
                manifest.append(entry)
    return manifest


def test_exports_load_in_datasets_and_trl_under_every_hash_seed(
    quickstart_db: Path, agent_db: Path, prompts_db: PromptsDb, chat_db: Path, tmp_path: Path
) -> None:
    stores = {"quickstart": quickstart_db, "agent": agent_db, "prompts": prompts_db.path, "chat": chat_db}
    manifest = _export_all(stores, tmp_path)
    assert {(Path(e["path"]).name.split("-")[0], e["format"]) for e in manifest} >= {
        ("quickstart", "messages"),
        ("quickstart", "triplets"),
        ("agent", "preferences"),
        ("prompts", "preferences"),
        ("quickstart", "trajectories"),
        ("agent", "trajectories"),
        ("chat", "trajectories"),
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    outcomes: List[Dict[str, Any]] = []
    for seed in SEEDS:
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "HF_DATASETS_CACHE": str(tmp_path / f"hf-cache-{seed}")}
        result = subprocess.run(
            [sys.executable, str(CHECKER), str(tmp_path / "manifest.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"PYTHONHASHSEED={seed}: {result.stderr[-4000:]}"
        outcomes.append(json.loads(result.stdout.strip().splitlines()[-1]))
    # Every seed loads every file with both loaders, every example renders, and the same way under every seed.
    assert all(outcome == outcomes[0] for outcome in outcomes)
    for entry in manifest:
        loaded = {name: found for name, found in outcomes[0].items() if name.startswith(entry["path"] + " ")}
        assert len(loaded) == 2 and all(found["examples"] == entry["rows"] for found in loaded.values()), entry
        assert len({found["digest"] for found in loaded.values()}) == 1, entry
    # JSON Lines and Parquet render the same chat texts.
    for entry in manifest:
        if entry["file_format"] == "jsonl":
            twin = str(Path(entry["path"]).with_suffix(".parquet"))
            jsonl = next(f["digest"] for n, f in outcomes[0].items() if n.startswith(entry["path"] + " "))
            parquet = next(f["digest"] for n, f in outcomes[0].items() if n.startswith(twin + " "))
            assert jsonl == parquet, entry["path"]
