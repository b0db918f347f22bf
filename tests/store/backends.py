"""Registry of store and collection backends exercised by the conformance suite.

Every test that takes the ``store`` fixture (see ``conftest.py``) runs once per entry of :data:`STORE_BACKENDS`;
every test that takes the ``collections`` fixture runs once per entry of :data:`COLLECTION_BACKENDS`.

Adding a backend (e.g. ``"sqlite"``, ``"postgres"``, ``"http"``) is a matter of three steps in this file:

1. Write an async context manager factory with the signature
   ``factory(*, scan_debounce_seconds: float = 0.0, **kwargs) -> AsyncContextManager[LightningStore]``.
   It must yield a *fresh, empty* store and clean everything up on exit (drop the database, stop the server, ...).
   Unknown ``kwargs`` may be ignored. Import heavy/optional dependencies *inside* the factory so that collecting the
   suite never fails because an optional driver is missing; call ``pytest.skip(...)`` inside the factory when a
   required service (e.g. a PostgreSQL server) is not reachable.

       @asynccontextmanager
       async def _sqlite_store(*, scan_debounce_seconds: float = 0.0, **kwargs):
           from rollouthub.store.sql import SqlLightningStore
           with tempfile.TemporaryDirectory() as tmp:
               store = SqlLightningStore(f"sqlite+aiosqlite:///{tmp}/store.db",
                                         scan_debounce_seconds=scan_debounce_seconds, **kwargs)
               try:
                   yield store
               finally:
                   await store.close()

2. Register it: ``STORE_BACKENDS["sqlite"] = _sqlite_store``.
3. Describe it: ``BACKEND_TRAITS["sqlite"] = BackendTraits(...)`` (see :class:`BackendTraits` for the meaning of every
   trait). Tests that depend on a trait call ``traits.require("<trait>")`` and are skipped (with a reason) on
   backends lacking it; this is the only kind of skip the suite uses.

Collection backends work the same way: an async context manager factory ``factory(**kwargs)`` yielding a fresh, empty
:class:`~rollouthub.store.collection.base.LightningCollections`, registered in :data:`COLLECTION_BACKENDS`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncContextManager

import pytest

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore
    from rollouthub.store.collection.base import LightningCollections


__all__ = [
    "BACKEND_TRAITS",
    "COLLECTION_BACKENDS",
    "STORE_BACKENDS",
    "BackendTraits",
]


@dataclass(frozen=True)
class BackendTraits:
    """What a store backend supports beyond the public ``LightningStore`` contract.

    Attributes:
        name: the backend name (key of :data:`STORE_BACKENDS`).
        in_process_clock: the store reads ``time.time()`` inside this Python process at call time, so the
            ``fake_clock`` fixture controls every timestamp it writes and every watchdog/debounce decision.
        in_process_logs: the store logs through this process' ``logging`` (``caplog`` sees its records).
        collection_based: the store object is a ``CollectionBasedLightningStore``; its private seams
            (``_sync_workers_with_attempts``, ``_post_add_spans``, ``_should_scan_for_unhealthy_rollouts``,
            ``collections``) exist and may be patched on the instance.
        memory: the store is an ``InMemoryLightningStore`` (eviction, ``_latest_resources_id``, ...).
        thread_safe: one store object may be driven concurrently from several threads, each running its own event
            loop (``asyncio.run`` per thread).
        native_errors: errors surface as the exception types and messages of the reference (``ValueError`` ...). Remote
            backends surface them as ``remote_error_types`` instead (messages are then not compared).
        remote_error_types: the exception types raised instead of the native ones when ``native_errors`` is False.
        max_wait_timeout: largest ``timeout`` accepted by ``wait_for_rollouts`` (``None`` = no cap; the HTTP client
            caps it at 0.1 s). Tests that need a longer wait are skipped on capped backends.
        statistics_name: expected value of ``statistics()["name"]``.
        atomic_sequence_id_blocks: ``get_many_span_sequence_ids`` allocates its ids as one consecutive block, even
            under concurrent allocations (the HTTP client has no bulk route and allocates one id per request).
        zero_limit_dequeue_records_worker: ``dequeue_many_rollouts(limit=0, worker_id=...)`` still records the worker
            as idle (the HTTP client sends no request at all for a non-positive limit).
    """

    name: str
    in_process_clock: bool = True
    in_process_logs: bool = True
    collection_based: bool = True
    memory: bool = False
    thread_safe: bool = False
    native_errors: bool = True
    remote_error_types: tuple[type[BaseException], ...] = ()
    max_wait_timeout: float | None = None
    statistics_name: str | None = None
    atomic_sequence_id_blocks: bool = True
    zero_limit_dequeue_records_worker: bool = True

    def has(self, trait: str) -> bool:
        return bool(getattr(self, trait))

    def require(self, *traits: str) -> None:
        """Skip the running test unless the backend has every given (boolean) trait."""
        missing = [trait for trait in traits if not self.has(trait)]
        if missing:
            pytest.skip(f"backend {self.name!r} lacks trait(s) {', '.join(missing)}")

    def require_wait_timeout(self, timeout: float | None) -> None:
        """Skip the running test when the backend cannot wait that long in a single ``wait_for_rollouts`` call."""
        cap = self.max_wait_timeout
        if cap is not None and (timeout is None or timeout > cap):
            pytest.skip(f"backend {self.name!r} caps wait_for_rollouts(timeout) at {cap}")

    @contextlib.contextmanager
    def raises(self, exc_type: type[BaseException], match: str | None = None) -> Iterator[Any]:
        """``pytest.raises`` that understands remote backends.

        Native backends must raise ``exc_type`` with a message matching ``match`` (a regex, as in ``pytest.raises``).
        Remote backends must raise one of ``remote_error_types`` (the message is not compared).
        """
        if self.native_errors:
            with pytest.raises(exc_type, match=match) as info:
                yield info
        else:
            with pytest.raises(self.remote_error_types) as info:
                yield info


# --------------------------------------------------------------------------------------------------------------------
# Store backends
# --------------------------------------------------------------------------------------------------------------------


@asynccontextmanager
async def _memory_store(*, scan_debounce_seconds: float = 0.0, **kwargs: Any) -> AsyncIterator[LightningStore]:
    from rollouthub.store.memory import InMemoryLightningStore

    yield InMemoryLightningStore(scan_debounce_seconds=scan_debounce_seconds, **kwargs)


@asynccontextmanager
async def _memory_threadsafe_store(
    *, scan_debounce_seconds: float = 0.0, **kwargs: Any
) -> AsyncIterator[LightningStore]:
    from rollouthub.store.memory import InMemoryLightningStore

    kwargs.setdefault("thread_safe", True)
    yield InMemoryLightningStore(scan_debounce_seconds=scan_debounce_seconds, **kwargs)


@asynccontextmanager
async def _http_store(*, scan_debounce_seconds: float = 0.0, **kwargs: Any) -> AsyncIterator[LightningStore]:
    """A ``LightningStoreClient`` talking to an in-process ``LightningStoreServer`` (thread mode) over loopback."""
    from rollouthub.store.client_server import LightningStoreClient, LightningStoreServer
    from rollouthub.store.memory import InMemoryLightningStore
    from rollouthub.utils.server_launcher import pick_free_port

    kwargs.setdefault("thread_safe", True)
    inner = InMemoryLightningStore(scan_debounce_seconds=scan_debounce_seconds, **kwargs)
    server = LightningStoreServer(inner, host="127.0.0.1", port=pick_free_port(), launch_mode="thread")
    await server.start()
    client = LightningStoreClient(server.endpoint, retry_delays=(0.05,), health_retry_delays=(0.05,))
    try:
        yield client
    finally:
        await client.close()
        await server.stop()


STORE_BACKENDS: dict[str, Callable[..., AsyncContextManager[LightningStore]]] = {
    "memory": _memory_store,
    "memory_threadsafe": _memory_threadsafe_store,
    "http": _http_store,
}


def _http_error_type() -> type[BaseException]:
    """``aiohttp.ClientResponseError`` (the base of every error the HTTP client raises for an error response)."""
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiohttp is a dependency of the HTTP client
        return Exception
    return aiohttp.ClientResponseError


BACKEND_TRAITS: dict[str, BackendTraits] = {
    "memory": BackendTraits(
        name="memory",
        memory=True,
        thread_safe=False,
        statistics_name="InMemoryLightningStore",
    ),
    "memory_threadsafe": BackendTraits(
        name="memory_threadsafe",
        memory=True,
        thread_safe=True,
        statistics_name="InMemoryLightningStore",
    ),
    "http": BackendTraits(
        name="http",
        # The server runs in a thread of this process and reads the patched global ``time.time``.
        in_process_clock=True,
        in_process_logs=True,
        collection_based=False,
        memory=False,
        thread_safe=True,
        native_errors=False,
        remote_error_types=(_http_error_type(),),
        max_wait_timeout=0.1,
        statistics_name="InMemoryLightningStore",
        atomic_sequence_id_blocks=False,
        zero_limit_dequeue_records_worker=False,
    ),
}


# --------------------------------------------------------------------------------------------------------------------
# Collection backends (the storage primitives)
# --------------------------------------------------------------------------------------------------------------------


@asynccontextmanager
async def _memory_collections(**kwargs: Any) -> AsyncIterator[LightningCollections]:
    from rollouthub.store.collection.memory import InMemoryLightningCollections

    kwargs.setdefault("lock_type", "asyncio")
    yield InMemoryLightningCollections(**kwargs)


COLLECTION_BACKENDS: dict[str, Callable[..., AsyncContextManager[LightningCollections]]] = {
    "memory": _memory_collections,
}


# SQL backends ("sqlite", "postgres"): factories and traits live in tests/store/sql_backends.py.
from tests.store.sql_backends import register as _register_sql_backends  # noqa: E402

_register_sql_backends(STORE_BACKENDS, BACKEND_TRAITS, COLLECTION_BACKENDS, BackendTraits)
