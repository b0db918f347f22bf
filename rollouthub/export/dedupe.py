"""``--dedupe``: drop rows that repeat an earlier row's training content (the first one is kept).

A row's identity is the exact JSON of the fields a trainer learns from, per format (:data:`DEDUPE_FIELDS`): the
``messages`` and ``tools`` of an SFT row, the prompt, answer and token ids of a triplet, the prompt, both answers and
tools of a preference pair, the token ids and mask of a trajectory (``prompt_ids``, ``response_ids``,
``response_mask``: the tokens trained on and which of them are the policy's). Ids, rewards, inputs and, for
trajectories, log-probabilities, policy versions and call boundaries are not part of it: of rows that differ only
there, the first in export order stays. Memory: a 16-byte hash per distinct row.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Mapping, Set, Tuple

__all__ = ["DEDUPE_FIELDS", "RowDeduper"]

DEDUPE_FIELDS: Dict[str, Tuple[str, ...]] = {
    "messages": ("messages", "tools"),
    "triplets": (
        "prompt",
        "completion",
        "response",
        "prompt_token_ids",
        "completion_token_ids",
        "response_token_ids",
    ),
    "preferences": ("prompt", "chosen", "rejected", "tools"),
    "trajectories": ("prompt_ids", "response_ids", "response_mask"),
}
"""The fields that identify a row, per format that can be de-duplicated (``rewards`` rows are one per rollout)."""


class RowDeduper:
    """Remembers the identities of the rows seen so far."""

    def __init__(self, format: str) -> None:
        """De-duplicate rows of ``format``; ``ValueError`` for a format without an identity (``rewards``)."""
        if format not in DEDUPE_FIELDS:
            raise ValueError(f"dedupe applies to {', '.join(DEDUPE_FIELDS)} rows, not to {format} rows")
        self.fields = DEDUPE_FIELDS[format]
        self._seen: Set[bytes] = set()

    def first_time(self, row: Mapping[str, Any]) -> bool:
        """Whether no earlier row had ``row``'s identity (and remember it)."""
        identity = json.dumps(
            [row.get(field) for field in self.fields], sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        digest = hashlib.blake2b(identity.encode(), digest_size=16).digest()
        if digest in self._seen:
            return False
        self._seen.add(digest)
        return True
