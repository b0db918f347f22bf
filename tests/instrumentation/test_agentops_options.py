"""The options that keep AgentOps quiet while it runs local (public ``agentops.init`` options, an env default)."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from rollouthub.instrumentation.agentops import agentops_init_options, enable_agentops_service


@pytest.fixture(autouse=True)
def _service_disabled() -> Iterator[None]:
    enable_agentops_service(False)
    yield
    enable_agentops_service(False)


def test_local_agentops_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTOPS_LOGGING_TO_FILE", raising=False)
    assert agentops_init_options() == {"log_session_replay_url": False, "log_level": "ERROR"}

    assert os.environ["AGENTOPS_LOGGING_TO_FILE"] == "false"  # no agentops.log in the working directory


def test_a_users_choice_of_log_file_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTOPS_LOGGING_TO_FILE", "true")
    agentops_init_options()

    assert os.environ["AGENTOPS_LOGGING_TO_FILE"] == "true"


def test_with_the_service_enabled_agentops_keeps_its_defaults() -> None:
    enable_agentops_service(True)
    assert agentops_init_options() == {}
