"""Helpers to import the scripts under ``examples/`` as modules, and the scenario-B mock LLM."""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

import pytest

from rollouthub.testing import MockOpenAIServer

EXAMPLES_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the directory is put on ``sys.path`` once)."""
    if EXAMPLES_DIR not in sys.path:
        sys.path.insert(0, EXAMPLES_DIR)
    return importlib.import_module(name)


@contextmanager
def scenario_b_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockOpenAIServer]:
    """The scenario-B mock LLM (``apo_custom_algorithm_trainer.mock_reply``) as ``OPENAI_BASE_URL``."""
    with MockOpenAIServer(reply=load_example("apo_custom_algorithm_trainer").mock_reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "dummy")
        yield server


@pytest.fixture()
def mock_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockOpenAIServer]:
    """:func:`scenario_b_llm` for one test."""
    with scenario_b_llm(monkeypatch) as server:
        yield server
