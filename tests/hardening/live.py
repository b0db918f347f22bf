"""Real store servers for the adversarial suite: one backend each, on a real port, reached over real HTTP.

:func:`live_server` starts ``LightningStoreServer`` on a free port with a fresh store of the requested backend:

* ``memory`` -- ``InMemoryLightningStore(thread_safe=True)``;
* ``sqlite`` -- ``SqlLightningStore`` on a fresh SQLite file;
* ``postgres`` -- ``SqlLightningStore`` on a fresh PostgreSQL schema (dropped afterwards), at
  ``ROLLOUTHUB_TEST_POSTGRES_URL`` (skipped with the reason when it is unset, as in the store suite; CI sets it).

SQL stores get a pool of ONE connection (``pool_size=1, max_overflow=0``): a request that left its connection inside
an open transaction, or otherwise unusable, makes the very next legitimate request fail -- which the suite checks
after every hostile request.

The suite only speaks HTTP to the server (aiohttp or raw sockets), so it guards any rewrite of the HTTP stack behind
``LightningStoreServer`` unchanged.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Dict

import aiohttp

from rollouthub.store.client_server import LightningStoreServer
from rollouthub.utils.server_launcher import pick_free_port
from tests.store.sql_backends import drop_pg_schema, postgres_url

BACKENDS = ("memory", "sqlite", "postgres")
"""Every backend the suite runs against."""


@dataclass
class Live:
    """A running server and the ids of the data seeded into it."""

    backend: str
    server: LightningStoreServer
    store: Any
    ids: Dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return self.server.endpoint

    @property
    def port(self) -> int:
        """The TCP port."""
        return int(self.server.server_launcher.port)


@asynccontextmanager
async def make_store(backend: str, **kwargs: Any) -> AsyncIterator[Any]:
    """A fresh store of ``backend`` (SQL stores: a pool of one connection unless ``pool_size`` is given)."""
    if backend == "memory":
        from rollouthub.store.memory import InMemoryLightningStore

        yield InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0, **kwargs)
        return
    from rollouthub.store.sql import SqlLightningStore

    kwargs.setdefault("pool_size", 1)
    kwargs.setdefault("max_overflow", 0)
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="rollouthub-hardening-") as tmp:
            store = SqlLightningStore(f"sqlite:///{tmp}/store.db", scan_debounce_seconds=0.0, **kwargs)
            try:
                yield store
            finally:
                await store.close()
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r}")
    url = postgres_url()  # skips (with the reason) when ROLLOUTHUB_TEST_POSTGRES_URL is unset, like the store suite
    schema = f"rh_hard_{uuid.uuid4().hex[:12]}"
    store = SqlLightningStore(url, scan_debounce_seconds=0.0, schema=schema, **kwargs)
    try:
        await store.initialize()
        yield store
    finally:
        await store.close()
        await drop_pg_schema(url, schema)


async def seed(live: Live) -> None:
    """Create one rollout with an attempt and a span, one queued rollout, a worker and a resources snapshot."""
    base = live.endpoint + "/v1/agl"
    async with aiohttp.ClientSession() as session:
        async with session.post(base + "/rollouts", json={"input": {"seed": 1}, "worker_id": "seed-worker"}) as r:
            assert r.status == 201, await r.text()
            started = await r.json()
        rollout_id, attempt_id = started["rollout_id"], started["attempt"]["attempt_id"]
        span = legit_span(rollout_id, attempt_id, sequence_id=1, span_id="00000000000000a1")
        async with session.post(base + "/spans", json=span) as r:
            assert r.status == 201, await r.text()
        async with session.post(base + "/workers/seed-worker", json={"heartbeat_stats": {"ok": 1}}) as r:
            assert r.status == 200, await r.text()
        resources = {"main": {"resource_type": "prompt_template", "template": "Hi {name}", "engine": "f-string"}}
        async with session.post(base + "/resources", json=resources) as r:
            assert r.status == 201, await r.text()
            resources_id = (await r.json())["resources_id"]
    live.ids.update(rollout_id=rollout_id, attempt_id=attempt_id, resources_id=resources_id, worker_id="seed-worker")


def legit_span(
    rollout_id: str, attempt_id: str, *, sequence_id: int = 1, span_id: str = "00000000000000b1"
) -> Dict[str, Any]:
    """The JSON body of a valid ``POST /v1/agl/spans``."""
    trace_id = "0" * 31 + "1"
    return {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": sequence_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": None,
        "name": "legit",
        "status": {"status_code": "OK", "description": None},
        "attributes": {"k": "v"},
        "events": [],
        "links": [],
        "start_time": 1.0,
        "end_time": 2.0,
        "context": {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}},
        "parent": None,
        "resource": {"attributes": {}, "schema_url": ""},
    }


@asynccontextmanager
async def _given(store: Any) -> AsyncIterator[Any]:
    yield store


@asynccontextmanager
async def live_server(
    backend: str,
    *,
    launch_mode: str = "asyncio",
    store_kwargs: Dict[str, Any] | None = None,
    store_override: Any = None,
    **server_kwargs: Any,
) -> AsyncIterator[Live]:
    """Serve a fresh, seeded store of ``backend`` (or ``store_override``) on a free port (``launch_mode="thread"``: its
    own event loop)."""
    stores = _given(store_override) if store_override is not None else make_store(backend, **(store_kwargs or {}))
    async with stores as store:
        server = LightningStoreServer(
            store, host="127.0.0.1", port=pick_free_port(), launch_mode=launch_mode, **server_kwargs
        )
        await server.start()
        live = Live(backend, server, store)
        try:
            await seed(live)
            yield live
        finally:
            await server.stop()
