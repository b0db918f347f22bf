"""Hardening of the store server: bearer-token auth, body-size limit, malformed input → 4xx, port conflicts, RSS."""

from __future__ import annotations

import asyncio
import gzip
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.utils.server_launcher import pick_free_port

pytestmark = pytest.mark.timeout(60)

TOKEN = "s3cret-token"


async def _start(**kwargs: Any) -> LightningStoreServer:
    server = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True),
        host="127.0.0.1",
        port=pick_free_port(),
        launch_mode="asyncio",
        **kwargs,
    )
    await server.start()
    return server


@pytest.fixture
async def auth_server() -> AsyncIterator[LightningStoreServer]:
    server = await _start(api_token=TOKEN)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def small_server() -> AsyncIterator[LightningStoreServer]:
    server = await _start(max_body_bytes=1024)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def server() -> AsyncIterator[LightningStoreServer]:
    server = await _start()
    try:
        yield server
    finally:
        await server.stop()


# ---------------------------------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------------------------------


async def test_health_needs_no_token(auth_server: LightningStoreServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(auth_server.endpoint + "/v1/agl/health") as r:
            assert r.status == 200 and await r.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/agl/statistics"),
        ("GET", "/v1/agl/rollouts"),
        ("POST", "/v1/agl/rollouts"),
        ("POST", "/v1/agl/queues/rollouts/dequeue"),
        ("POST", "/v1/agl/workers/w"),
        ("POST", "/v1/traces"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/agl/nonexistent"),
    ],
)
async def test_routes_require_token(auth_server: LightningStoreServer, method: str, path: str) -> None:
    url = auth_server.endpoint + path
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json={"input": 1}) as r:
            assert r.status == 401
            assert r.headers["www-authenticate"] == "Bearer"
            assert (await r.json())["detail"] == "Missing bearer token"
        async with session.request(method, url, json={"input": 1}, headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401 and (await r.json())["detail"] == "Invalid bearer token"
        async with session.request(method, url, json={"input": 1}, headers={"Authorization": TOKEN}) as r:
            assert r.status == 401  # the "Bearer " scheme is required


async def test_valid_token_is_accepted(auth_server: LightningStoreServer) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(auth_server.endpoint + "/v1/agl/rollouts", json={"input": 1}) as r:
            assert r.status == 201
        async with session.get(auth_server.endpoint + "/v1/agl/statistics") as r:
            assert r.status == 200 and (await r.json())["total_rollouts"] == 1
        async with session.get(auth_server.endpoint + "/openapi.json") as r:
            assert r.status == 200


async def test_client_sends_token(auth_server: LightningStoreServer) -> None:
    from rollouthub.store.client import LightningStoreClient

    client = LightningStoreClient(auth_server.endpoint, api_token=TOKEN)
    try:
        rollout = await client.enqueue_rollout(input={"x": 1})
        assert (await auth_server.get_rollout_by_id(rollout.rollout_id)) is not None
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Body size limit
# ---------------------------------------------------------------------------------------------------------------------


async def test_declared_body_too_large(small_server: LightningStoreServer) -> None:
    payload = {"input": "x" * 2048}
    async with aiohttp.ClientSession() as session:
        async with session.post(small_server.endpoint + "/v1/agl/rollouts", json=payload) as r:
            assert r.status == 413 and "too large" in (await r.json())["detail"]
        async with session.post(small_server.endpoint + "/v1/agl/rollouts", json={"input": "small"}) as r:
            assert r.status == 201


async def test_streamed_body_too_large(small_server: LightningStoreServer) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input": "'
        for _ in range(8):
            yield b"y" * 256
        yield b'"}'

    async with aiohttp.ClientSession() as session:
        async with session.post(
            small_server.endpoint + "/v1/agl/rollouts", data=chunks(), headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 413


async def test_otlp_body_too_large(small_server: LightningStoreServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            small_server.endpoint + "/v1/traces",
            data=b"\x00" * 4096,
            headers={"Content-Type": "application/x-protobuf"},
        ) as r:
            assert r.status == 413


def _raw_http(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


async def test_bad_content_length_is_rejected(server: LightningStoreServer) -> None:
    port = server.server_launcher.port
    request = (
        b"POST /v1/agl/rollouts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 99999999999\r\n\r\n{}"
    )
    response = await asyncio.to_thread(_raw_http, port, request)
    assert response.startswith(b"HTTP/1.1 413")


# ---------------------------------------------------------------------------------------------------------------------
# Malformed input → 4xx naming the field, never 5xx
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,body,status,field",
    [
        ("/v1/agl/rollouts", b"{not json", 422, None),
        ("/v1/agl/rollouts", b"[1, 2]", 422, None),
        ("/v1/agl/rollouts", b'{"input": 1, "mode": "bogus"}', 422, "mode"),
        ("/v1/agl/rollouts", b'{"input": 1, "config": {"max_attempts": 0}}', 422, "max_attempts"),
        ("/v1/agl/rollouts", b'{"input": 1, "metadata": "text"}', 422, "metadata"),
        ("/v1/agl/queues/rollouts/dequeue", b'{"limit": "many"}', 422, "limit"),
        ("/v1/agl/queues/rollouts/enqueue", b'{"rollouts": [{"mode": "train"}]}', 422, "input"),
        ("/v1/agl/rollouts/search", b'{"status_in": ["nope"]}', 422, "status_in"),
        ("/v1/agl/workers/search", b'{"limit": 1.5}', 422, "limit"),
        ("/v1/agl/spans/next", b'{"rollout_id": 1}', 422, "rollout_id"),
        ("/v1/agl/waits/rollouts", b'{"rollout_ids": "abc"}', 422, "rollout_ids"),
        ("/v1/agl/resources", b'{"r": {"resource_type": "llm"}}', 422, "endpoint"),
        ("/v1/agl/spans", b'{"rollout_id": "r"}', 422, "attempt_id"),
        ("/v1/agl/rollouts", b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None),
        ("/v1/agl/rollouts", b'{"input": "\xff\xfe"}', 400, None),
        ("/v1/agl/waits/rollouts", b'{"rollout_ids": ["x"], "timeout": NaN}', 400, "timeout"),
        ("/v1/agl/waits/rollouts", b'{"rollout_ids": ["x"], "timeout": Infinity}', 400, "timeout"),
    ],
)
async def test_malformed_json_bodies(
    server: LightningStoreServer, path: str, body: bytes, status: int, field: Any
) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(server.endpoint + path, data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == status
            payload = await r.json()
            if field is not None:
                assert field in str(payload["detail"])


async def test_invalid_query_params(server: LightningStoreServer) -> None:
    async with aiohttp.ClientSession() as session:
        for path, params in [
            ("/v1/agl/rollouts", {"limit": "ten"}),
            ("/v1/agl/workers", {"status_in": "asleep"}),
            ("/v1/agl/spans", {"rollout_id": "r", "filter_logic": "xor"}),
            ("/v1/agl/resources", {"offset": "1e3"}),
        ]:
            async with session.get(server.endpoint + path, params=params) as r:
                assert r.status == 422, path
                loc = (await r.json())["detail"][0]["loc"]
                assert loc[0] == "query" and loc[1] in params


async def test_store_errors_become_400(server: LightningStoreServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            server.endpoint + "/v1/agl/rollouts/ro-x/attempts/latest", json={"status": "failed"}
        ) as r:
            assert r.status == 400
            body = await r.json()
            assert body["error_type"] == "ValueError" and "ro-x" in body["detail"]


async def test_unexpected_errors_keep_the_500_shape(server: LightningStoreServer) -> None:
    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kaputt")

    server.store.statistics = boom  # type: ignore[union-attr,method-assign]
    async with aiohttp.ClientSession() as session:
        async with session.get(server.endpoint + "/v1/agl/statistics") as r:
            assert r.status == 500
            body = await r.json()
            assert body["detail"] == "Internal server error" and body["error_type"] == "RuntimeError"
            assert "kaputt" in body["traceback"]


@pytest.mark.parametrize(
    "headers,body,needle",
    [
        ({"Content-Type": "text/plain"}, b"hello", b"Unsupported Content-Type 'text/plain'"),
        ({"Content-Type": "application/x-protobuf"}, b"\xff\xff\xff\xff", b"Unable to parse OTLP traces payload"),
        (
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            b"not gzip at all",
            b"Unable to decompress gzip",
        ),
        ({"Content-Type": "application/json"}, b"{broken", b"invalid JSON"),
        ({"Content-Type": "application/json"}, b'{"resourceSpans": 5}', b"Unable to parse OTLP traces payload"),
        (
            {"Content-Type": "application/json"},
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            b"traceId",
        ),
    ],
)
async def test_bad_otlp_payloads_are_400(
    server: LightningStoreServer, headers: dict[str, str], body: bytes, needle: bytes
) -> None:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.post(server.endpoint + "/v1/traces", data=body, headers=headers) as r:
            assert r.status == 400
            raw = await r.read()
            assert r.headers["content-encoding"] == "gzip"  # aiohttp sends Accept-Encoding: gzip
            assert needle in gzip.decompress(raw)


async def test_otlp_spans_for_unknown_rollout_are_400(server: LightningStoreServer) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    for key in ("agentlightning.rollout_id", "agentlightning.attempt_id"):
        attr = rs.resource.attributes.add()
        attr.key = key
        attr.value.string_value = "missing"
    rs.scope_spans.add().spans.add(name="s", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            server.endpoint + "/v1/traces",
            data=gzip.compress(request.SerializeToString()),
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        ) as r:
            assert r.status == 400


# ---------------------------------------------------------------------------------------------------------------------
# Port conflicts fail fast
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["asyncio", "thread"])
async def test_port_in_use_fails_fast(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        server = LightningStoreServer(
            InMemoryLightningStore(thread_safe=True),
            host="127.0.0.1",
            port=port,
            launch_mode=mode,  # type: ignore[arg-type]
        )
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="did not start up within") as info:
            await server.start()
        assert time.monotonic() - started < 1.0
        assert "address already in use" in str(info.value)
        assert "address already in use" in caplog.text
        with pytest.raises(RuntimeError, match="address already in use"):
            await server.run_forever()
    finally:
        blocker.close()


async def test_second_server_on_same_port_fails(server: LightningStoreServer) -> None:
    other = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True),
        host="127.0.0.1",
        port=server.server_launcher.port,
        launch_mode="asyncio",
    )
    with pytest.raises(RuntimeError, match="address already in use"):
        await other.start()
    async with aiohttp.ClientSession() as session:  # the first server is unaffected
        async with session.get(server.endpoint + "/v1/agl/health") as r:
            assert r.status == 200


# ---------------------------------------------------------------------------------------------------------------------
# Idle memory of the CLI server
# ---------------------------------------------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_idle_rss_below_100_mb(tmp_path: Any) -> None:
    import urllib.request

    port = pick_free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--backend", "memory", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.05)
        assert _rss_mb(process.pid) < 100
    finally:
        process.terminate()
        process.wait(10)
