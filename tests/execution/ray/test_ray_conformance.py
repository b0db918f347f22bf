"""The Trainer conformance scenarios that run on ``shm`` and ``cs`` (``tests/examples``: a custom ``@algo`` with LLM
calls, and the built-in APO) run on ``"ray"`` too, on a local Ray cluster, with the same checks: the same search, the
same rollouts, rewards and worker telemetry in the store, the same LLM calls."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from rollouthub.testing import MockOpenAIServer
from tests.examples.conftest import load_example, scenario_b_llm
from tests.examples.test_scenario_b import check_scenario_b
from tests.examples.test_scenario_c import check_scenario_c

pytest.importorskip("ray", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def mock_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockOpenAIServer]:
    """Scenario B's mock LLM as ``OPENAI_BASE_URL`` (the example hands it to the runner actors)."""
    with scenario_b_llm(monkeypatch) as server:
        yield server


def test_scenario_b_on_ray(local_ray: Any, mock_llm: MockOpenAIServer, caplog: pytest.LogCaptureFixture) -> None:
    check_scenario_b(load_example("apo_custom_algorithm_trainer"), "ray", mock_llm, caplog)


def test_scenario_c_on_ray(local_ray: Any) -> None:
    check_scenario_c(load_example("apo_builtin"), "ray")
