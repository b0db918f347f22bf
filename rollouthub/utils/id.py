"""Identifier generation."""

from __future__ import annotations

import hashlib
import uuid

__all__ = ["generate_id"]


def generate_id(length: int) -> str:
    """Return the first ``length`` lowercase hex characters of the SHA-1 digest of a fresh UUID4."""
    return hashlib.sha1(uuid.uuid4().bytes).hexdigest()[:length]
