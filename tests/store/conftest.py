"""Fixtures of the store conformance suite.

* ``store`` — a fresh store, parametrized over :data:`tests.store.backends.STORE_BACKENDS` (watchdog debounce 0).
* ``store_factory`` — the backend's factory, for tests that need non-default constructor arguments.
* ``traits`` — the :class:`~tests.store.backends.BackendTraits` of the backend under test.
* ``inmemory_store`` — an ``InMemoryLightningStore(scan_debounce_seconds=0)`` (not parametrized).
* ``collections`` — fresh collections, parametrized over :data:`tests.store.backends.COLLECTION_BACKENDS`.
* ``fake_clock`` — a controllable clock installed as ``time.time`` (the business logic in
  ``rollouthub.store.collection_based`` reads the global ``time.time`` at call time).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, AsyncContextManager

import pytest

from tests.store.backends import BACKEND_TRAITS, COLLECTION_BACKENDS, STORE_BACKENDS, BackendTraits


class FakeClock:
    """A manually advanced replacement for ``time.time``.

    ``now`` starts at the real wall-clock time (truncated to a whole second, so that advancing by binary fractions
    such as 0.5 gives exact sums) when the fixture is created, so timestamps stay realistic.
    """

    def __init__(self, start: float) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

    def set(self, value: float) -> None:
        self.now = float(value)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock(float(int(time.time())))
    monkeypatch.setattr(time, "time", clock)
    return clock


@pytest.fixture(params=list(STORE_BACKENDS), ids=list(STORE_BACKENDS))
def store_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def traits(store_backend: str) -> BackendTraits:
    return BACKEND_TRAITS[store_backend]


@pytest.fixture
def store_factory(store_backend: str) -> Callable[..., AsyncContextManager[Any]]:
    return STORE_BACKENDS[store_backend]


@pytest.fixture
async def store(store_factory: Callable[..., AsyncContextManager[Any]]) -> AsyncIterator[Any]:
    async with store_factory(scan_debounce_seconds=0.0) as created:
        yield created


@pytest.fixture
def inmemory_store() -> Any:
    from rollouthub.store.memory import InMemoryLightningStore

    return InMemoryLightningStore(scan_debounce_seconds=0.0)


@pytest.fixture(params=list(COLLECTION_BACKENDS), ids=list(COLLECTION_BACKENDS))
async def collections(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with COLLECTION_BACKENDS[request.param]() as created:
        yield created
