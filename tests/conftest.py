"""Session-wide test configuration.

``ROLLOUTHUB_TEST_REQUIRE_AGENTOPS=1`` (set by the agentops leg of ``.ci/run``) makes the run fail at once when the
optional ``agentops`` package cannot be imported, so the tests that need it can never be skipped silently there.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_AGENTOPS_ENV = "ROLLOUTHUB_TEST_REQUIRE_AGENTOPS"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run the agentops leg without an importable ``agentops``; keep AgentOps' log file out of the tree."""
    os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "false")  # AgentOps writes ./agentops.log otherwise
    if os.environ.get(REQUIRE_AGENTOPS_ENV, "").strip().lower() not in ("1", "true", "yes", "on"):
        return
    try:
        import agentops  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        raise pytest.UsageError(
            f"{REQUIRE_AGENTOPS_ENV} is set but agentops cannot be imported ({exc!r}); "
            "install the extra with: pip install -e '.[dev,agentops]'"
        ) from exc
