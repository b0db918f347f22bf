"""Notices about optional packages: at most once per process, and a warning only when the user asked for the
integration (see docs/runtime.md, "Warnings about optional packages")."""

from __future__ import annotations

import logging
from typing import Iterator

import pytest

from rollouthub.instrumentation import (
    AGENTOPS_INSTALLED,
    LITELLM_INSTALLED,
    instrument_all,
    uninstrument_all,
    uninstrument_openai,
)
from rollouthub.instrumentation.placeholder import skip_unimplemented
from rollouthub.tracer import AgentOpsTracer
from rollouthub.tracer.agentops import AGENTOPS_MISSING_MESSAGE
from rollouthub.trainer import Trainer
from rollouthub.utils.log_once import forget_logged_once


@pytest.fixture(autouse=True)
def _fresh_process_state() -> Iterator[None]:
    forget_logged_once()
    uninstrument_openai()
    yield
    forget_logged_once()


def test_instrument_all_warns_about_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="rollouthub"):
        for _ in range(3):  # e.g. three runners in one process
            instrument_all()
        for _ in range(3):
            uninstrument_all()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    messages = [r.getMessage() for r in caplog.records if "not installed" in r.getMessage()]
    assert len(messages) == len(set(messages))  # each notice once
    if not LITELLM_INSTALLED:
        assert "litellm is not installed; nothing to instrument." in messages
    if not AGENTOPS_INSTALLED:
        assert any(m.startswith("agentops is not installed") for m in messages)


def test_placeholder_warns_only_when_asked_for(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="rollouthub.instrumentation"):
        assert skip_unimplemented("jsonlib", "json", requested=False) is False
        assert skip_unimplemented("jsonlib", "json", requested=True) is False
        assert skip_unimplemented("jsonlib", "json", requested=True) is False
    levels = [r.levelno for r in caplog.records if "jsonlib instrumentation is not implemented" in r.getMessage()]
    assert levels == [logging.DEBUG, logging.WARNING]
    with pytest.raises(ImportError, match="instrument_nothing requires the 'no_such_package_xyz' package"):
        skip_unimplemented("nothing", "no_such_package_xyz", requested=True)


@pytest.mark.skipif(AGENTOPS_INSTALLED, reason="the fallback notice exists only without the agentops extra")
def test_agentops_fallback_warns_once_when_chosen(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="rollouthub"):
        for _ in range(2):
            with AgentOpsTracer().lifespan():
                pass
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and r.getMessage() == AGENTOPS_MISSING_MESSAGE
    ]
    assert len(warnings) == 1


@pytest.mark.skipif(AGENTOPS_INSTALLED, reason="the fallback notice exists only without the agentops extra")
def test_trainer_default_tracer_falls_back_quietly(caplog: pytest.LogCaptureFixture) -> None:
    tracer = Trainer().tracer
    assert isinstance(tracer, AgentOpsTracer) and tracer.fallback_warning is False
    with caplog.at_level(logging.DEBUG, logger="rollouthub"):
        with tracer.lifespan():
            pass
    [record] = [r for r in caplog.records if r.getMessage() == AGENTOPS_MISSING_MESSAGE]
    assert record.levelno == logging.DEBUG
