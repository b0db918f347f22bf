"""Helpers to import the scripts under ``examples/`` as modules."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

EXAMPLES_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the directory is put on ``sys.path`` once)."""
    if EXAMPLES_DIR not in sys.path:
        sys.path.insert(0, EXAMPLES_DIR)
    return importlib.import_module(name)
