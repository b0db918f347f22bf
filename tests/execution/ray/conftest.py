"""The Ray tests run only where Ray is installed (the ``ray`` leg of ``.ci/run``, in its own virtualenv).

Each test module here starts with ``pytest.importorskip("ray")``, so without Ray they are reported as skipped (a
module-level skip in this conftest would be an error when the directory is named on the command line). Under
``ROLLOUTHUB_TEST_REQUIRE_RAY=1`` (the ray leg) a missing Ray fails the run instead. Every test here carries the
``ray`` marker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

REQUIRE_RAY_ENV = "ROLLOUTHUB_TEST_REQUIRE_RAY"

if os.environ.get(REQUIRE_RAY_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
    import ray  # noqa: F401  -- the ray leg: an ImportError here fails the run

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark every test of this directory ``ray``."""
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.ray)
