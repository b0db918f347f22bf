"""``log_once``: a notice at most once per process."""

from __future__ import annotations

import logging
from typing import Iterator

import pytest

from rollouthub.utils.log_once import forget_logged_once, log_once


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    forget_logged_once("tests.log_once")
    yield
    forget_logged_once("tests.log_once")


def test_logs_once_per_key(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("rollouthub.tests.log_once")
    with caplog.at_level(logging.INFO, logger="rollouthub.tests.log_once"):
        assert log_once(log, logging.INFO, "tests.log_once", "first %s", 1)
        assert not log_once(log, logging.INFO, "tests.log_once", "again")
    assert [r.getMessage() for r in caplog.records] == ["first 1"]


def test_a_filtered_notice_is_remembered_too(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("rollouthub.tests.log_once")
    with caplog.at_level(logging.WARNING, logger="rollouthub.tests.log_once"):
        assert log_once(log, logging.DEBUG, "tests.log_once", "hidden")
        assert not log_once(log, logging.DEBUG, "tests.log_once", "hidden")
    forget_logged_once("tests.log_once")
    with caplog.at_level(logging.DEBUG, logger="rollouthub.tests.log_once"):
        assert log_once(log, logging.DEBUG, "tests.log_once", "after forgetting")
    assert [r.getMessage() for r in caplog.records] == ["after forgetting"]
