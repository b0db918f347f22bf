"""Fixtures shared by the runner tests."""

from __future__ import annotations

from typing import Iterator

import pytest

from rollouthub.tracer import clear_active_tracer, get_active_tracer


@pytest.fixture(autouse=True)
def _clean_active_tracer() -> Iterator[None]:
    """Every test starts and ends without an active tracer."""
    while get_active_tracer() is not None:
        clear_active_tracer()
    yield
    while get_active_tracer() is not None:
        clear_active_tracer()
