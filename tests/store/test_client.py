"""Client-side behaviour of ``LightningStoreClient`` against a scripted aiohttp server.

The scripted server is a real ``aiohttp.web`` application on a free loopback port: it records every request
(method, path, JSON body, headers, arrival time) and answers from per-route scripts (status + JSON body, or a
dropped connection, or a response slower than the client's timeout), falling back to a default answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rollouthub.store.client import (
    LightningStoreAuthError,
    LightningStoreClient,
    LightningStoreHTTPError,
    LightningStoreRemoteValueError,
)
from rollouthub.types import EnqueueRolloutRequest, RolloutConfig

NOW = 1_700_000_000.0
PREFIX = "/v1/agl"

DISCONNECT = "disconnect"
"""Script entry: close the connection without answering (client sees ``ServerDisconnectedError``)."""
HANG = "hang"
"""Script entry: answer only after the client's request timeout (client sees ``asyncio.TimeoutError``)."""


@dataclass
class Reply:
    """Script entry: answer with ``status`` and a JSON ``body``."""

    status: int = 200
    body: Any = None


@dataclass
class Recorded:
    """One request received by the scripted server."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    at: float
    raw_path: str = ""


def _rollout(rollout_id: str = "ro-1", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "rollout_id": rollout_id,
        "input": {"q": 1},
        "start_time": NOW,
        "end_time": None,
        "mode": None,
        "resources_id": None,
        "status": "queuing",
        "config": {"timeout_seconds": None, "unresponsive_seconds": None, "max_attempts": 1, "retry_condition": []},
        "metadata": {},
    }
    data.update(extra)
    return data


def _attempted(rollout_id: str = "ro-1", worker_id: str | None = None) -> dict[str, Any]:
    attempt = {
        "rollout_id": rollout_id,
        "attempt_id": f"at-{rollout_id}",
        "sequence_id": 1,
        "start_time": NOW,
        "end_time": None,
        "status": "preparing",
        "worker_id": worker_id,
        "last_heartbeat_time": None,
        "metadata": {},
    }
    return _rollout(rollout_id, status="preparing", attempt=attempt)


def _page(items: list[Any]) -> dict[str, Any]:
    return {"items": items, "limit": -1, "offset": 0, "total": len(items)}


@dataclass
class ScriptedServer:
    """A real HTTP server whose answers are scripted per ``(method, path)``."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    scripts: dict[tuple[str, str], deque[Any]] = field(default_factory=lambda: defaultdict(deque))
    defaults: dict[tuple[str, str], Any] = field(default_factory=dict)
    handlers: dict[tuple[str, str], Callable[[Any], Awaitable[web.StreamResponse]]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    clients: list[LightningStoreClient] = field(default_factory=list)
    hang_seconds: float = 5.0

    def script(self, method: str, path: str, *entries: Any) -> None:
        """Queue answers for ``method path`` (``path`` relative to ``/v1/agl``); used once each, in order."""
        self.scripts[(method.upper(), PREFIX + path)].extend(entries)

    def default(self, method: str, path: str, entry: Any) -> None:
        """The answer for ``method path`` once its script is exhausted."""
        self.defaults[(method.upper(), PREFIX + path)] = entry

    def calls(self, method: str, path: str) -> list[Recorded]:
        """Recorded requests to ``method path`` (relative to ``/v1/agl``)."""
        return [r for r in self.requests if r.method == method.upper() and r.path == PREFIX + path]

    @property
    def api_calls(self) -> list[Recorded]:
        """Recorded requests except health probes."""
        return [r for r in self.requests if not r.path.endswith("/health")]

    @property
    def health_calls(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/health")]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(
            Recorded(request.method, request.path, body, dict(request.headers), time.monotonic(), request.raw_path)
        )
        key = (request.method, request.path)
        if key in self.handlers:
            return await self.handlers[key](body)
        queue = self.scripts.get(key)
        if queue:
            entry = queue.popleft()
        elif key in self.defaults:
            entry = self.defaults[key]
        elif request.path.endswith("/health"):
            entry = Reply(200, {"status": "ok"})
        else:
            entry = Reply(404, {"detail": "Not Found"})
        if entry == DISCONNECT:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if entry == HANG:
            try:
                await asyncio.wait_for(self.release.wait(), self.hang_seconds)
            except asyncio.TimeoutError:
                pass
            entry = Reply(200, None)
        assert isinstance(entry, Reply)
        return web.json_response(entry.body, status=entry.status)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    scripted.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    try:
        yield scripted
    finally:
        for client in scripted.clients:
            await client.close()
        scripted.release.set()
        await runner.cleanup()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_client(server: ScriptedServer, **kwargs: Any) -> LightningStoreClient:
    kwargs.setdefault("retry_delays", (0.01, 0.01, 0.01))
    kwargs.setdefault("health_retry_delays", (0.01,))
    client = LightningStoreClient(server.url, **kwargs)
    server.clients.append(client)  # closed by the fixture
    return client


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLOUTHUB_API_TOKEN", raising=False)


# ---------------------------------------------------------------------------------------------------------------------
# Construction, identity, pickling
# ---------------------------------------------------------------------------------------------------------------------


def test_addresses_capabilities_and_otlp_endpoint() -> None:
    client = LightningStoreClient("http://127.0.0.1:4747/")
    assert client.server_address_root == "http://127.0.0.1:4747"
    assert client.server_address == "http://127.0.0.1:4747/v1/agl"
    assert client.otlp_traces_endpoint() == "http://127.0.0.1:4747/v1/traces"
    assert client.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": True}
    assert client.retry_delays == (1.0, 2.0, 5.0)
    assert client.health_retry_delays == (0.1, 0.2, 0.5)
    assert client.request_timeout == 30.0
    assert client.connection_timeout == 5.0
    assert client.api_token is None


async def test_pickling_keeps_configuration_and_recreates_sessions(server: ScriptedServer) -> None:
    client = LightningStoreClient(
        server.url,
        retry_delays=(0.5,),
        health_retry_delays=(),
        request_timeout=7.0,
        connection_timeout=3.0,
        api_token="tok",
    )
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    assert await client.statistics() == {"name": "X"}  # a live session exists now
    clone = pickle.loads(pickle.dumps(client))
    assert clone.server_address_root == client.server_address_root
    assert clone.server_address == client.server_address
    assert clone.retry_delays == (0.5,)
    assert clone.health_retry_delays == ()
    assert clone.request_timeout == 7.0
    assert clone.connection_timeout == 3.0
    assert clone.api_token == "tok"
    assert clone._sessions == {}
    assert await clone.statistics() == {"name": "X"}
    assert server.requests[-1].headers["Authorization"] == "Bearer tok"
    assert clone._get_session() is not client._get_session()
    await clone.close()
    await client.close()


async def test_close_closes_a_session_that_served_no_request(server: ScriptedServer) -> None:
    """A session taken but never used for a request (its close-at-loop-shutdown guard not yet started) is closed too."""
    client = make_client(server)
    session = client._get_session()
    await client.close()
    assert session.closed


async def test_close_closes_the_session_and_a_new_one_is_created_on_demand(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    await client.statistics()
    session = client._get_session()
    await client.close()
    assert session.closed
    await client.statistics()
    assert client._get_session() is not session
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Retry schedule and health probing
# ---------------------------------------------------------------------------------------------------------------------


async def test_application_error_500_costs_four_attempts(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("GET", "/statistics", Reply(500, {"detail": "Internal server error", "error_type": "KeyError"}))
    with pytest.raises(aiohttp.ClientResponseError) as info:
        await client.statistics()
    assert info.value.status == 500
    assert len(server.calls("GET", "/statistics")) == 4
    assert len(server.health_calls) == 4  # one (successful) probe after every failed attempt
    await client.close()


@pytest.mark.parametrize("status", [404, 403, 400, 422])
async def test_client_errors_are_not_retried(server: ScriptedServer, status: int) -> None:
    client = make_client(server)
    server.default("GET", "/statistics", Reply(status, {"detail": "nope"}))
    with pytest.raises(aiohttp.ClientResponseError) as info:
        await client.statistics()
    assert info.value.status == status
    assert len(server.calls("GET", "/statistics")) == 1
    assert server.health_calls == []
    await client.close()


@pytest.mark.parametrize(
    "failure",
    [DISCONNECT, HANG, Reply(500, {"detail": "boom"}), Reply(408, {"detail": "slow"}), Reply(503, {"detail": "busy"})],
    ids=["server-disconnected", "timeout", "500", "408", "503"],
)
async def test_transient_failure_then_success(server: ScriptedServer, failure: Any) -> None:
    # A POST route: aiohttp itself transparently re-sends idempotent GETs once after a dropped connection.
    client = make_client(server, request_timeout=0.3)
    server.script("POST", "/spans/next", failure, Reply(200, {"sequence_id": 7}))
    assert await client.get_next_span_sequence_id("ro-1", "at-1") == 7
    assert len(server.calls("POST", "/spans/next")) == 2
    assert len(server.health_calls) == 1
    await client.close()


async def test_network_error_kinds_surface_as_expected_exceptions(server: ScriptedServer) -> None:
    client = make_client(server, request_timeout=0.3, retry_delays=(), health_retry_delays=())
    server.script("POST", "/spans/next", DISCONNECT, HANG)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.get_next_span_sequence_id("ro-1", "at-1")
    with pytest.raises(asyncio.TimeoutError):
        await client.get_next_span_sequence_id("ro-1", "at-1")
    await client.close()


async def test_unhealthy_server_stops_retrying_and_raises_the_original_error(server: ScriptedServer) -> None:
    client = make_client(server, health_retry_delays=(0.01, 0.01))
    server.default("POST", "/spans/next", DISCONNECT)
    server.default("GET", "/health", Reply(503, {"detail": "down"}))
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.get_next_span_sequence_id("ro-1", "at-1")
    assert len(server.calls("POST", "/spans/next")) == 1
    assert len(server.health_calls) == 3  # len(health_retry_delays) + 1 probes


async def test_unreachable_server_raises_connection_error_after_one_round() -> None:
    client = LightningStoreClient(
        f"http://127.0.0.1:{_free_port()}", retry_delays=(0.01, 0.01, 0.01), health_retry_delays=(0.01,)
    )
    probes: list[str] = []
    original = client._wait_until_healthy

    async def counting(session: aiohttp.ClientSession) -> bool:
        probes.append("probe")
        return await original(session)

    client._wait_until_healthy = counting  # type: ignore[method-assign]
    with pytest.raises(aiohttp.ClientConnectorError):
        await client.statistics()
    assert probes == ["probe"]  # unhealthy after the first failure: no second attempt
    await client.close()


async def test_custom_retry_delays_are_honoured(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=(0.01, 0.02), health_retry_delays=(0.01,))
    server.script("GET", "/statistics", Reply(500, {}), Reply(500, {}), Reply(200, {"name": "ok"}))
    assert await client.statistics() == {"name": "ok"}
    times = [r.at for r in server.calls("GET", "/statistics")]
    assert len(times) == 3
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert 0.01 <= gaps[0] < 0.01 + 0.1
    assert 0.02 <= gaps[1] < 0.02 + 0.1
    assert len(server.health_calls) >= 2
    await client.close()


async def test_empty_retry_delays_make_one_attempt_but_still_probe(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=())
    server.default("GET", "/statistics", Reply(500, {}))
    with pytest.raises(aiohttp.ClientResponseError):
        await client.statistics()
    assert len(server.calls("GET", "/statistics")) == 1
    assert len(server.health_calls) >= 1
    await client.close()


async def test_empty_health_retry_delays_retry_without_probing(server: ScriptedServer) -> None:
    client = make_client(server, health_retry_delays=())
    server.script("GET", "/statistics", Reply(503, {}), Reply(503, {}), Reply(200, {"name": "ok"}))
    assert await client.statistics() == {"name": "ok"}
    assert len(server.calls("GET", "/statistics")) == 3
    assert server.health_calls == []
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Error shapes
# ---------------------------------------------------------------------------------------------------------------------


async def test_our_server_400_error_shape(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default(
        "POST", "/rollouts/ro-x/attempts", Reply(400, {"detail": "Rollout ro-x not found", "error_type": "ValueError"})
    )
    with pytest.raises(ValueError, match="Rollout ro-x not found") as info:
        await client.start_attempt("ro-x")
    error = info.value
    assert isinstance(error, LightningStoreRemoteValueError)
    assert isinstance(error, aiohttp.ClientResponseError)
    assert (error.status, error.detail, error.error_type) == (400, "Rollout ro-x not found", "ValueError")
    assert len(server.api_calls) == 1
    await client.close()


async def test_reference_server_500_error_shape(server: ScriptedServer) -> None:
    client = make_client(server)
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: Rollout ro-x not found\n'
    server.default(
        "POST",
        "/rollouts/ro-x/attempts",
        Reply(500, {"detail": "Internal server error", "error_type": "ValueError", "traceback": traceback}),
    )
    with pytest.raises(aiohttp.ClientResponseError) as info:
        await client.start_attempt("ro-x")
    error = info.value
    assert error.status == 500
    assert isinstance(error, LightningStoreRemoteValueError)
    assert error.detail == "Rollout ro-x not found"
    assert error.server_traceback == traceback
    assert "Rollout ro-x not found" in str(error)
    assert len(server.api_calls) == 4
    await client.close()


async def test_validation_error_422_is_summarized(server: ScriptedServer) -> None:
    client = make_client(server)
    detail = [{"type": "literal_error", "loc": ["body", "status"], "msg": "Input should be 'queuing'", "input": "x"}]
    server.default("POST", "/rollouts/ro-1", Reply(422, {"detail": detail}))
    with pytest.raises(LightningStoreRemoteValueError) as info:
        await client.update_rollout("ro-1", status="bogus")  # type: ignore[arg-type]
    assert info.value.status == 422
    assert info.value.detail == "body.status: Input should be 'queuing'"
    assert server.api_calls[0].body == {"status": "bogus"}
    await client.close()


async def test_non_json_error_body(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=())

    server.default("GET", "/statistics", Reply(502, "upstream exploded"))
    with pytest.raises(LightningStoreHTTPError) as info:
        await client.statistics()
    assert info.value.status == 502
    assert not isinstance(info.value, ValueError)
    await client.close()


def test_http_errors_pickle() -> None:
    error = LightningStoreRemoteValueError(None, (), status=400, detail="bad", error_type="ValueError")
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is LightningStoreRemoteValueError
    assert (clone.status, clone.detail, clone.error_type) == (400, "bad", "ValueError")


# ---------------------------------------------------------------------------------------------------------------------
# Lookups that map failures to None
# ---------------------------------------------------------------------------------------------------------------------


async def test_get_rollout_by_id_null_and_reference_500(server: ScriptedServer) -> None:
    client = make_client(server)
    server.script("GET", "/rollouts/ro-missing", Reply(200, None))
    assert await client.get_rollout_by_id("ro-missing") is None
    assert len(server.api_calls) == 1
    server.default(
        "GET",
        "/rollouts/ro-missing",
        Reply(500, {"detail": "Internal server error", "error_type": "ResponseValidationError", "traceback": ""}),
    )
    assert await client.get_rollout_by_id("ro-missing") is None
    assert len(server.api_calls) == 1 + 4
    server.default("GET", "/rollouts/ro-1", Reply(200, _attempted("ro-1")))
    fetched = await client.get_rollout_by_id("ro-1")
    assert fetched is not None and fetched.attempt.attempt_id == "at-ro-1"  # type: ignore[union-attr]
    await client.close()


async def test_get_worker_by_id_errors_are_not_swallowed(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=())
    server.script("GET", "/workers/w-1", Reply(200, None), Reply(500, {}))
    assert await client.get_worker_by_id("w-1") is None
    with pytest.raises(aiohttp.ClientResponseError):
        await client.get_worker_by_id("w-1")
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Request shapes
# ---------------------------------------------------------------------------------------------------------------------


async def test_enqueue_many_posts_one_request_with_all_items(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("POST", "/queues/rollouts/enqueue", Reply(201, [_rollout("ro-1"), _rollout("ro-2", mode="val")]))
    result = await client.enqueue_many_rollouts(
        [
            EnqueueRolloutRequest(input={"a": 1}, mode="train", resources_id="rs-1"),
            EnqueueRolloutRequest(input={"b": 2}, mode="val", config=RolloutConfig(max_attempts=3)),
        ]
    )
    assert [r.rollout_id for r in result] == ["ro-1", "ro-2"]
    (call,) = server.calls("POST", "/queues/rollouts/enqueue")
    items = call.body["rollouts"]
    assert [(i["input"], i["mode"], i["resources_id"]) for i in items] == [
        ({"a": 1}, "train", "rs-1"),
        ({"b": 2}, "val", None),
    ]
    assert items[1]["config"]["max_attempts"] == 3
    assert await client.enqueue_many_rollouts([]) == []
    assert len(server.api_calls) == 1
    await client.close()


async def test_enqueue_rollout_sends_single_item_and_rejects_empty_answer(server: ScriptedServer) -> None:
    client = make_client(server)
    server.script("POST", "/queues/rollouts/enqueue", Reply(201, [_rollout("ro-1")]), Reply(201, []))
    rollout = await client.enqueue_rollout({"q": 1}, mode="test", metadata={"k": "v"})
    assert rollout.rollout_id == "ro-1"
    assert server.api_calls[0].body == {
        "rollouts": [{"input": {"q": 1}, "mode": "test", "resources_id": None, "config": None, "metadata": {"k": "v"}}]
    }
    with pytest.raises(RuntimeError, match="enqueue_rollout returned no rollouts"):
        await client.enqueue_rollout("x")
    await client.close()


async def test_dequeue_request_shapes_and_non_positive_limits(server: ScriptedServer) -> None:
    client = make_client(server)
    server.script(
        "POST",
        "/queues/rollouts/dequeue",
        Reply(200, [_attempted("ro-1", "w"), _attempted("ro-2", "w")]),
        Reply(200, [_attempted("ro-3")]),
        Reply(200, []),
    )
    many = await client.dequeue_many_rollouts(limit=2, worker_id="w")
    assert [r.rollout_id for r in many] == ["ro-1", "ro-2"]
    one = await client.dequeue_rollout()
    assert one is not None and one.rollout_id == "ro-3"
    assert await client.dequeue_rollout(worker_id="w2") is None
    bodies = [r.body for r in server.calls("POST", "/queues/rollouts/dequeue")]
    assert bodies == [{"limit": 2, "worker_id": "w"}, {"limit": 1}, {"limit": 1, "worker_id": "w2"}]
    assert await client.dequeue_many_rollouts(limit=0) == []
    assert await client.dequeue_many_rollouts(limit=-3, worker_id="w") == []
    assert len(server.requests) == 3
    await client.close()


async def test_dequeue_failures_are_not_retried_and_warn_once_after_success(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(server)
    server.script("POST", "/queues/rollouts/dequeue", Reply(500, {}), Reply(200, []), Reply(500, {}), DISCONNECT)
    with caplog.at_level(logging.DEBUG, logger="rollouthub.store.client"):
        assert await client.dequeue_rollout() is None  # failure before any success: debug only
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert await client.dequeue_rollout() is None  # success (empty)
        assert await client.dequeue_many_rollouts(limit=3) == []  # first failure after success: warning
        assert await client.dequeue_rollout() is None  # further failures: debug only
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Dequeue" in warnings[0].getMessage()
    assert len(server.requests) == 4  # no retries, no health probes
    await client.close()


async def test_dequeue_or_wait_long_polls_and_sends_the_timeout(server: ScriptedServer) -> None:
    """Against a server that holds the request (ours), one request per slice of at most 1 s carries ``timeout``."""
    client = make_client(server)

    async def held_then_claimed(body: Any) -> web.StreamResponse:
        if len(server.calls("POST", "/queues/rollouts/dequeue")) >= 2:
            return web.json_response([_attempted("ro-9", "w")])
        await asyncio.sleep(body["timeout"])  # nothing queued: held for the whole slice
        return web.json_response([])

    server.handlers[("POST", PREFIX + "/queues/rollouts/dequeue")] = held_then_claimed
    claimed = await client.dequeue_rollout_or_wait(worker_id="w", timeout=5.0)
    assert claimed is not None and claimed.rollout_id == "ro-9"
    bodies = [r.body for r in server.calls("POST", "/queues/rollouts/dequeue")]
    assert bodies == [{"limit": 1, "worker_id": "w", "timeout": 1.0}] * 2
    await client.close()


async def test_dequeue_or_wait_sleeps_when_the_server_answers_at_once(server: ScriptedServer) -> None:
    """A server without the extension (it ignores ``timeout``) gets the reference poll: one request, then a sleep."""
    client = make_client(server)
    server.default("POST", "/queues/rollouts/dequeue", Reply(200, []))
    started = time.monotonic()
    assert await client.dequeue_rollout_or_wait(worker_id="w", timeout=0.6) is None
    assert time.monotonic() - started >= 0.55
    assert len(server.calls("POST", "/queues/rollouts/dequeue")) == 1
    stop: list[bool] = []
    waiting = asyncio.create_task(client.dequeue_rollout_or_wait(timeout=30.0, abandoned=lambda: bool(stop)))
    await asyncio.sleep(0.2)
    stop.append(True)
    assert await asyncio.wait_for(waiting, timeout=2.0) is None  # the sleep is cut short by ``abandoned``
    assert len(server.calls("POST", "/queues/rollouts/dequeue")) == 2
    await client.close()


async def test_query_methods_send_expected_bodies(server: ScriptedServer) -> None:
    client = make_client(server)
    for path in ("/rollouts/search", "/workers/search", "/spans/search", "/rollouts/ro-1/attempts/search"):
        server.default("POST", path, Reply(200, _page([])))
    server.default("GET", "/resources", Reply(200, _page([])))

    await client.query_workers(status_in=["busy"], limit=5, offset=2)
    await client.query_workers(worker_id_contains="w", sort_by="worker_id", sort_order="desc")
    assert [r.body for r in server.calls("POST", "/workers/search")] == [
        {"filter_logic": "and", "limit": 5, "offset": 2, "status_in": ["busy"]},
        {
            "filter_logic": "and",
            "limit": -1,
            "offset": 0,
            "worker_id_contains": "w",
            "sort_by": "worker_id",
            "sort_order": "desc",
        },
    ]

    with pytest.warns(DeprecationWarning):
        await client.query_rollouts(status=["queuing"], rollout_ids=["a"], limit=3)
    await client.query_rollouts(status_in=["running"], status=["queuing"], sort_by="start_time", filter_logic="or")
    assert [r.body for r in server.calls("POST", "/rollouts/search")] == [
        {"limit": 3, "offset": 0, "filter_logic": "and", "status_in": ["queuing"], "rollout_id_in": ["a"]},
        {
            "limit": -1,
            "offset": 0,
            "filter_logic": "or",
            "status_in": ["running"],
            "sort_by": "start_time",
            "sort_order": "asc",
        },
    ]

    await client.query_attempts("ro-1", sort_by=None, limit=2)
    assert server.calls("POST", "/rollouts/ro-1/attempts/search")[0].body == {"limit": 2, "offset": 0}

    await client.query_spans("ro-1", "latest", name_contains="llm", limit=10)
    assert server.calls("POST", "/spans/search")[0].body == {
        "rollout_id": "ro-1",
        "limit": 10,
        "offset": 0,
        "filter_logic": "and",
        "attempt_id": "latest",
        "name_contains": "llm",
        "sort_by": "sequence_id",
        "sort_order": "asc",
    }

    await client.query_resources(resources_id_contains="rs-", sort_by="resources_id", limit=2, offset=1)
    (resources_call,) = server.calls("GET", "/resources")
    assert resources_call.body is None
    await client.close()


async def test_update_methods_send_only_provided_fields(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=())
    server.default("POST", "/rollouts/ro-1", Reply(200, _rollout("ro-1")))
    attempt = _attempted("ro-1")["attempt"]
    server.default("POST", "/rollouts/ro-1/attempts/latest", Reply(200, attempt))
    worker = {"worker_id": "w-1", "status": "unknown"}
    server.default("POST", "/workers/w-1", Reply(200, worker))

    await client.update_rollout("ro-1", mode=None, metadata={"m": 1}, config=RolloutConfig(max_attempts=2))
    await client.update_rollout("ro-1", status=None)  # type: ignore[arg-type]
    await client.update_attempt("ro-1", "latest", worker_id="", metadata={})
    await client.update_worker("w-1")
    await client.update_worker("w-1", heartbeat_stats={"cpu": 1})
    bodies = [r.body for r in server.api_calls]
    assert bodies[0]["mode"] is None and bodies[0]["metadata"] == {"m": 1}
    assert bodies[0]["config"]["max_attempts"] == 2 and "status" not in bodies[0]
    assert bodies[1] == {"status": None}
    assert bodies[2] == {"worker_id": "", "metadata": {}}
    assert bodies[3] is None
    assert bodies[4] == {"heartbeat_stats": {"cpu": 1}}
    await client.close()


async def test_path_segments_are_percent_encoded(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("GET", "/workers/a/b c", Reply(200, None))  # aiohttp.web matches on the decoded path
    assert await client.get_worker_by_id("a/b c") is None
    assert server.api_calls[0].raw_path == PREFIX + "/workers/a%2Fb%20c"
    await client.close()


async def test_get_next_span_sequence_id_returns_int(server: ScriptedServer) -> None:
    client = make_client(server)
    server.script("POST", "/spans/next", Reply(200, {"sequence_id": 1}), Reply(200, {"sequence_id": 2}))
    first = await client.get_next_span_sequence_id("ro-1", "at-1")
    second = await client.get_next_span_sequence_id("ro-1", "at-1")
    assert (first, second) == (1, 2)
    assert type(first) is int and type(second) is int
    assert server.api_calls[0].body == {"rollout_id": "ro-1", "attempt_id": "at-1"}
    await client.close()


async def test_wait_for_rollouts_cap(server: ScriptedServer) -> None:
    client = make_client(server)
    with pytest.raises(ValueError) as info:
        await client.wait_for_rollouts(rollout_ids=["ro-1"], timeout=0.2)
    assert str(info.value) == (
        "Timeout must be less than 0.1 seconds in LightningStoreClient to avoid blocking the event loop"
    )
    assert server.requests == []
    server.default("POST", "/waits/rollouts", Reply(200, [_rollout("ro-1", status="succeeded")]))
    done = await client.wait_for_rollouts(rollout_ids=["ro-1"], timeout=0.1)
    assert [r.status for r in done] == ["succeeded"]
    await client.wait_for_rollouts(rollout_ids=["ro-1"])  # None is not rejected
    assert [r.body for r in server.api_calls] == [
        {"rollout_ids": ["ro-1"], "timeout": 0.1},
        {"rollout_ids": ["ro-1"], "timeout": None},
    ]
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------------------------------


async def test_bearer_token_is_sent_on_every_request(server: ScriptedServer) -> None:
    client = make_client(server, api_token="s3cret")
    server.script("GET", "/statistics", Reply(500, {}), Reply(200, {"name": "X"}))
    server.default("POST", "/queues/rollouts/dequeue", Reply(200, []))
    await client.statistics()
    await client.dequeue_rollout()
    assert len(server.requests) == 4  # failed attempt, probe, retry, dequeue
    assert {r.headers.get("Authorization") for r in server.requests} == {"Bearer s3cret"}
    await client.close()


async def test_token_defaults_to_environment(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUTHUB_API_TOKEN", "from-env")
    client = make_client(server)
    assert client.api_token == "from-env"
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    await client.statistics()
    assert server.requests[0].headers["Authorization"] == "Bearer from-env"
    await client.close()
    monkeypatch.delenv("ROLLOUTHUB_API_TOKEN")
    no_token = make_client(server)
    await no_token.statistics()
    assert "Authorization" not in server.requests[1].headers
    await no_token.close()


async def test_401_raises_auth_error_without_retry_even_where_errors_are_swallowed(server: ScriptedServer) -> None:
    client = make_client(server, api_token="wrong")
    server.default("GET", "/statistics", Reply(401, {"detail": "Unauthorized"}))
    server.default("GET", "/rollouts/ro-1", Reply(401, {"detail": "Unauthorized"}))
    server.default("POST", "/queues/rollouts/dequeue", Reply(401, {"detail": "Unauthorized"}))
    with pytest.raises(LightningStoreAuthError, match="bearer token") as info:
        await client.statistics()
    assert info.value.status == 401
    with pytest.raises(LightningStoreAuthError):
        await client.get_rollout_by_id("ro-1")
    with pytest.raises(LightningStoreAuthError):
        await client.dequeue_rollout()
    assert len(server.requests) == 3
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Sessions per event loop
# ---------------------------------------------------------------------------------------------------------------------


async def test_one_session_per_event_loop_across_threads(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    barrier = threading.Barrier(2, timeout=10)
    seen: list[tuple[int, aiohttp.ClientSession]] = []

    async def use_client() -> None:
        assert await client.statistics() == {"name": "X"}
        session = client._get_session()
        assert session is client._get_session()  # reused within the loop
        seen.append((id(asyncio.get_running_loop()), session))
        await asyncio.to_thread(barrier.wait)  # both loops alive at the same time
        assert await client.statistics() == {"name": "X"}

    await asyncio.gather(asyncio.to_thread(asyncio.run, use_client()), asyncio.to_thread(asyncio.run, use_client()))
    assert len(seen) == 2
    assert seen[0][0] != seen[1][0]
    assert seen[0][1] is not seen[1][1]
    assert len(server.calls("GET", "/statistics")) == 4
    # asyncio.run finalized each thread's loop, which closed that loop's session without an explicit close().
    assert seen[0][1].closed and seen[1][1].closed
    # The client still works on this loop, with its own session; entries of closed loops are pruned.
    assert await client.statistics() == {"name": "X"}
    assert len(client._sessions) == 1
    await client.close()


async def test_close_from_one_loop_closes_a_session_of_another_running_loop(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    started = threading.Event()
    stop = threading.Event()
    sessions: list[aiohttp.ClientSession] = []

    async def other_loop() -> None:
        await client.statistics()
        sessions.append(client._get_session())
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.005)

    thread = threading.Thread(target=asyncio.run, args=(other_loop(),))
    thread.start()
    try:
        assert await asyncio.to_thread(started.wait, 10)
        await client.statistics()
        mine = client._get_session()
        await client.close()
        assert mine.closed
        deadline = time.monotonic() + 5
        while not sessions[0].closed and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert sessions[0].closed
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 10)


def _child_uses_inherited_client(client: LightningStoreClient) -> None:
    assert client._sessions == {}  # the parent's sessions (and sockets) were dropped at fork
    assert asyncio.run(client.statistics()) == {"name": "X"}


async def test_forked_child_uses_the_inherited_client_with_fresh_sessions(server: ScriptedServer) -> None:
    import multiprocessing

    client = make_client(server)
    server.default("GET", "/statistics", Reply(200, {"name": "X"}))
    assert await client.statistics() == {"name": "X"}
    assert len(client._sessions) == 1
    child = multiprocessing.get_context("fork").Process(target=_child_uses_inherited_client, args=(client,))
    child.start()
    await asyncio.to_thread(child.join, 30)
    assert child.exitcode == 0
    assert len(server.calls("GET", "/statistics")) == 2
    assert await client.statistics() == {"name": "X"}  # the parent's session is untouched


# ---------------------------------------------------------------------------------------------------------------------
# Spans
# ---------------------------------------------------------------------------------------------------------------------


def _span(rollout_id: str, attempt_id: str, span_id: str, sequence_id: int = 1) -> Any:
    from rollouthub.types import Span

    return Span.from_attributes(
        attributes={}, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id, span_id=span_id
    )


async def test_add_many_spans_groups_dedups_and_stops_at_failing_group(server: ScriptedServer) -> None:
    client = make_client(server, retry_delays=())
    seen: set[tuple[str, str, str]] = set()
    in_flight = 0
    max_in_flight = 0

    async def spans_handler(body: Any) -> web.Response:
        nonlocal in_flight, max_in_flight
        if body["rollout_id"] == "ro-bad":
            return web.json_response({"detail": "Rollout ro-bad not found", "error_type": "ValueError"}, status=400)
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        key = (body["rollout_id"], body["attempt_id"], body["span_id"])
        if key in seen:
            return web.json_response(None, status=201)
        seen.add(key)
        return web.json_response(body, status=201)

    server.handlers[("POST", PREFIX + "/spans")] = spans_handler

    spans = [_span("ro-1", "at-1", f"s{i}", i) for i in range(20)] + [
        _span("ro-2", "at-2", "x"),
        _span("ro-1", "at-1", "s3", 99),  # in-batch duplicate of s3
    ]
    result = await client.add_many_spans(spans)
    assert [s.span_id for s in result] == [f"s{i}" for i in range(20)] + ["x"]
    assert next(s for s in result if s.span_id == "s3").sequence_id == 3  # the first occurrence won
    assert 1 < max_in_flight <= 8

    server.requests.clear()
    with pytest.raises(ValueError, match="Rollout ro-bad not found"):
        await client.add_many_spans([_span("ro-1", "at-1", "k"), _span("ro-bad", "at-x", "b"), _span("ro-3", "a", "n")])
    assert [r.body["span_id"] for r in server.requests] == ["k", "b"]  # the group after the failure is never sent
    assert await client.add_many_spans([]) == []
    await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Store-API emulation on top of HTTP restrictions
# ---------------------------------------------------------------------------------------------------------------------


async def test_limit_zero_is_emulated_because_http_rejects_it(server: ScriptedServer) -> None:
    client = make_client(server)
    page = {"items": [_rollout("ro-1")], "limit": 1, "offset": 0, "total": 3}
    server.default("POST", "/rollouts/search", Reply(200, page))
    result = await client.query_rollouts(limit=0)
    assert list(result) == [] and result.total == 3 and result.limit == 0
    assert server.api_calls[0].body["limit"] == 1


async def test_deprecated_query_aliases_warn(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("POST", "/rollouts/search", Reply(200, _page([])))
    with pytest.warns(DeprecationWarning, match="status is deprecated, use status_in instead"):
        await client.query_rollouts(status=["failed"])
    with pytest.warns(DeprecationWarning, match="rollout_ids is deprecated, use rollout_id_in instead"):
        await client.query_rollouts(rollout_ids=["ro-1"])
    assert [r.body.get("status_in") for r in server.api_calls] == [["failed"], None]
    assert server.api_calls[1].body["rollout_id_in"] == ["ro-1"]


async def test_negative_wait_timeout_is_sent_as_zero(server: ScriptedServer) -> None:
    client = make_client(server)
    server.default("POST", "/waits/rollouts", Reply(200, []))
    assert await client.wait_for_rollouts(rollout_ids=["ro-1"], timeout=-1) == []
    assert server.api_calls[0].body == {"rollout_ids": ["ro-1"], "timeout": 0.0}


# ---------------------------------------------------------------------------------------------------------------------
# Against the real LightningStoreServer
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
async def real_server() -> AsyncIterator[Any]:
    from rollouthub.store.client_server import LightningStoreServer
    from rollouthub.store.memory import InMemoryLightningStore

    store = InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0)
    live = LightningStoreServer(store, host="127.0.0.1", port=_free_port(), launch_mode="thread", api_token="t0ken")
    await live.start()
    try:
        yield live
    finally:
        await live.stop()


async def test_real_server_sequence_ids_and_authentication(real_server: Any) -> None:
    client = LightningStoreClient(
        real_server.endpoint, retry_delays=(0.01,), health_retry_delays=(0.01,), api_token="t0ken"
    )
    wrong = LightningStoreClient(
        real_server.endpoint, retry_delays=(0.01,), health_retry_delays=(0.01,), api_token="bad"
    )
    anonymous = LightningStoreClient(real_server.endpoint, retry_delays=(0.01,), health_retry_delays=(0.01,))
    try:
        rollout = await client.start_rollout(input={"task": 1})
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        first = await client.get_next_span_sequence_id(rid, aid)
        second = await client.get_next_span_sequence_id(rid, aid)
        assert (first, second) == (1, 2)
        assert type(first) is int and type(second) is int
        assert await client.get_rollout_by_id("ro-does-not-exist") is None
        with pytest.raises(ValueError, match="not found"):
            await client.start_attempt("ro-does-not-exist")
        # Explicit nulls where the store forbids them are rejected by the server with 400 (no retry).
        for call in (
            lambda: client.update_rollout(rid, status=None),  # type: ignore[arg-type]
            lambda: client.update_rollout(rid, config=None),  # type: ignore[arg-type]
            lambda: client.update_attempt(rid, aid, last_heartbeat_time=None),  # type: ignore[arg-type]
            lambda: client.update_worker("w-1", heartbeat_stats=None),  # type: ignore[arg-type]
        ):
            with pytest.raises(LightningStoreRemoteValueError) as info:
                await call()
            assert info.value.status == 400
        updated = await client.update_rollout(rid, mode=None, metadata={"k": 1})
        assert updated.mode is None and updated.metadata == {"k": 1}
        for bad in (wrong, anonymous):
            with pytest.raises(LightningStoreAuthError):
                await bad.statistics()
            with pytest.raises(LightningStoreAuthError):
                await bad.dequeue_rollout()
        assert await anonymous._wait_until_healthy(anonymous._get_session())  # health needs no token
    finally:
        for each in (client, wrong, anonymous):
            await each.close()
