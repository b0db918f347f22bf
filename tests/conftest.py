"""Session-wide test configuration.

``ROLLOUTHUB_TEST_REQUIRE_AGENTOPS=1`` (set by the agentops leg of ``.ci/run``) makes the run fail at once when the
optional ``agentops`` package cannot be imported, so the tests that need it can never be skipped silently there.
``ROLLOUTHUB_TEST_REQUIRE_TRAIN=1`` (the train leg, which runs the tests marked ``train``) does the same for the
training stack (torch, transformers, peft, trl, datasets).
"""

from __future__ import annotations

import os

import pytest

REQUIRE_AGENTOPS_ENV = "ROLLOUTHUB_TEST_REQUIRE_AGENTOPS"
REQUIRE_TRAIN_ENV = "ROLLOUTHUB_TEST_REQUIRE_TRAIN"
TRAIN_MODULES = ("torch", "transformers", "peft", "trl", "datasets")


def _required(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run the agentops leg without an importable ``agentops``; keep AgentOps' log file out of the tree."""
    os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "false")  # AgentOps writes ./agentops.log otherwise
    if _required(REQUIRE_TRAIN_ENV):
        for module in TRAIN_MODULES:
            try:
                __import__(module)
            except Exception as exc:
                raise pytest.UsageError(
                    f"{REQUIRE_TRAIN_ENV} is set but {module} cannot be imported ({exc!r}); install the training stack "
                    "with: pip install torch==2.13.0 && pip install -e '.[dev,train,lora]' trl datasets"
                ) from exc
    if not _required(REQUIRE_AGENTOPS_ENV):
        return
    try:
        import agentops  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        raise pytest.UsageError(
            f"{REQUIRE_AGENTOPS_ENV} is set but agentops cannot be imported ({exc!r}); "
            "install the extra with: pip install -e '.[dev,agentops]'"
        ) from exc
