"""Marks for tests that need the training stack (the ``[train]`` extra: torch, transformers).

``pytestmark = TRAIN_ONLY`` in a module marks its tests ``train`` (the train leg of ``.ci/run`` runs ``pytest -m
train`` in a virtualenv with the stack, under ``ROLLOUTHUB_TEST_REQUIRE_TRAIN=1``, where they cannot be skipped) and
skips them, with that reason, in the main leg, whose install stays without torch.
"""

from __future__ import annotations

import importlib.util

import pytest

__all__ = ["TRAIN_INSTALLED", "TRAIN_ONLY"]

TRAIN_INSTALLED = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
"""Whether torch and transformers are importable here."""

TRAIN_ONLY = [
    pytest.mark.train,
    pytest.mark.skipif(
        not TRAIN_INSTALLED, reason="needs the [train] extra (torch, transformers); the train leg of .ci/run runs it"
    ),
]
"""Marks of a test module that needs the training stack."""
