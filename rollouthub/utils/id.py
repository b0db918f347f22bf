"""Identifier generation."""

from __future__ import annotations

import os

__all__ = ["generate_id"]


def generate_id(length: int) -> str:
    """Return ``length`` random lowercase hex characters (from the operating system's CSPRNG).

    The same alphabet and distribution as the reference's first characters of a SHA-1 digest of a fresh UUID4, at a
    fifth of the cost (no UUID object, no hash): ids are made on every enqueue and claim."""
    return os.urandom((length + 1) // 2).hex()[:length]
