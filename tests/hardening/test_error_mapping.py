"""The error table of docs/server.md: what each kind of exception raised by the store becomes over HTTP.

The store of a real server is made to raise (its method replaced at run time); the answer is checked on a hot route
(served by the front door) and on a route served by FastAPI, which must agree.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable

import aiohttp
import pytest

from rollouthub.store.base import SpansEvictedError
from rollouthub.store.domains import InputDomainError

from .live import live_server


def _asyncpg(name: str) -> Callable[[], BaseException]:
    def build() -> BaseException:
        import asyncpg.exceptions

        return getattr(asyncpg.exceptions, name)("from the database")  # type: ignore[no-any-return]

    return build


@pytest.mark.parametrize(
    ("make_error", "status", "error_type"),
    [
        (lambda: ValueError("Rollout ro-x not found"), 400, "ValueError"),
        (lambda: InputDomainError("input.q", "contains a NUL character"), 400, "InputDomainError"),
        (lambda: SpansEvictedError("ro-x"), 410, "SpansEvictedError"),
        (_asyncpg("NumericValueOutOfRangeError"), 400, "NumericValueOutOfRangeError"),
        (_asyncpg("CharacterNotInRepertoireError"), 400, "CharacterNotInRepertoireError"),
        (_asyncpg("TooManyConnectionsError"), 503, "TooManyConnectionsError"),
        (_asyncpg("SerializationError"), 503, "SerializationError"),
        (lambda: sqlite3.OperationalError("database is locked"), 503, "OperationalError"),
        (lambda: ConnectionRefusedError("connection refused"), 503, "ConnectionRefusedError"),
        (lambda: RuntimeError("a bug"), 500, "RuntimeError"),
    ],
)
async def test_store_exceptions_map_to_their_status(
    make_error: Callable[[], BaseException], status: int, error_type: str
) -> None:
    async with live_server("memory") as live:
        store: Any = live.store

        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise make_error()

        store.query_rollouts = fail  # POST /rollouts/search: a hot route (front door)
        store.query_workers = fail  # GET /workers: a FastAPI route
        async with aiohttp.ClientSession() as session:
            answers = []
            async with session.post(live.endpoint + "/v1/agl/rollouts/search", json={}) as r:
                answers.append((r.status, await r.json()))
            async with session.get(live.endpoint + "/v1/agl/workers") as r:
                answers.append((r.status, await r.json()))
        for got, body in answers:
            assert got == status, body
            assert body["error_type"] == error_type
            assert ("traceback" in body) == (status == 500)
        assert answers[0][1] == answers[1][1] or status == 500  # tracebacks differ by route


@pytest.mark.parametrize(
    ("make_error", "status"),
    [
        (_asyncpg("TooManyConnectionsError"), 503),
        (lambda: ConnectionResetError("reset"), 503),
        (_asyncpg("CharacterNotInRepertoireError"), 400),
        (lambda: ValueError("Rollout ro-x not found"), 400),
    ],
)
async def test_otlp_export_maps_store_failures(make_error: Callable[[], BaseException], status: int) -> None:
    from .cases import otlp_request

    async with live_server("memory") as live:
        store: Any = live.store

        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise make_error()

        store.add_many_spans_assigning_ids = fail
        store.add_many_spans = fail
        body = otlp_request(live.ids["rollout_id"], live.ids["attempt_id"])
        async with aiohttp.ClientSession() as session:
            async with session.post(
                live.endpoint + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
            ) as r:
                assert r.status == status, await r.read()
