"""HTTP/1.1 behaviour of the store server (uvicorn + the request pipeline) on a real port, over raw sockets.

Every test starts a real ``LightningStoreServer`` (asyncio launch mode: uvicorn runs in the test's event loop, so the
tests can look at uvicorn's server state) and talks HTTP/1.1 bytes to it through ``asyncio.open_connection``:
keep-alive, pipelining, ``Connection: close`` and HTTP/1.0, malformed requests, chunked and ``Expect: 100-continue``
bodies, the body limit on declared and streamed bodies, client disconnects, HEAD, large responses, errors, auth, CORS
and a graceful shutdown with a request in flight. No sleeps synchronize anything: the tests wait for conditions, with
timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest

from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import Span
from rollouthub.utils.server_launcher import PythonServerLauncherArgs, pick_free_port

pytestmark = pytest.mark.timeout(60)

LIMIT = 4096
Headers = List[Tuple[str, str]]


# ---------------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------------


class Response:
    """A parsed HTTP response: status, headers (lower-case names, in order), body, and the raw bytes."""

    def __init__(self, status: int, headers: Headers, body: bytes, raw: bytes) -> None:
        self.status, self.headers, self.body, self.raw = status, headers, body, raw

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name``."""
        return next((value for key, value in self.headers if key == name), None)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class Conn:
    """A raw client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, *, limit: int = 2**24, receive_buffer: Optional[int] = None) -> Conn:
        """Connect; ``receive_buffer`` fixes the socket's ``SO_RCVBUF`` (no kernel autotuning) and, with a small
        ``limit``, makes a client that is not reading really stop reading."""
        if receive_buffer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=limit)
            return cls(reader, writer)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=limit)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, *, head: bool = False) -> Response:
        """Read one response (``head``: the request was a HEAD, so no body follows)."""
        return await asyncio.wait_for(self._response(head), 10)

    async def _response(self, head: bool) -> Response:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = [(k.lower(), v) for k, v in (line.split(": ", 1) for line in lines[1:] if line)]
        lookup = dict(headers)
        body = b""
        if head or status in (204, 304) or status < 200:
            pass
        elif "content-length" in lookup:
            body = await self.reader.readexactly(int(lookup["content-length"]))
        elif lookup.get("transfer-encoding") == "chunked":
            parts = []
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            body = b"".join(parts)
        else:
            body = await self.reader.read()
        return Response(status, headers, body, raw + body)

    async def closed_by_server(self) -> bool:
        """Whether the server closes the connection (EOF) without sending anything more."""
        return await asyncio.wait_for(self.reader.read(1), 10) == b""

    def close(self) -> None:
        self.writer.close()


def request(
    method: str, path: str, body: Optional[bytes] = None, headers: Optional[Headers] = None, version: str = "1.1"
) -> bytes:
    """The bytes of a request (JSON content type and a Content-Length when a body is given)."""
    lines = [f"{method} {path} HTTP/{version}", "Host: test"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers or []]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def chunked(parts: List[bytes]) -> bytes:
    """A chunked request body."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds (polling), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def server_state(server: LightningStoreServer) -> Any:
    """uvicorn's ``ServerState`` of a server started in asyncio mode."""
    return server.server_launcher._server.server_state


async def start(**kwargs: Any) -> LightningStoreServer:
    args = kwargs.pop("launcher_args", None) or PythonServerLauncherArgs(
        host="127.0.0.1", port=pick_free_port(), launch_mode="asyncio", healthcheck_url="/v1/agl/health"
    )
    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), launcher_args=args, **kwargs)
    await server.start()
    return server


@contextlib.asynccontextmanager
async def running(**kwargs: Any) -> AsyncIterator[LightningStoreServer]:
    server = await start(**kwargs)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def server() -> AsyncIterator[LightningStoreServer]:
    async with running(max_body_bytes=LIMIT) as srv:
        yield srv


@pytest.fixture
async def conn(server: LightningStoreServer) -> AsyncIterator[Conn]:
    connection = await Conn.open(server.server_launcher.port)
    try:
        yield connection
    finally:
        connection.close()


HEALTH = request("GET", "/v1/agl/health")


# ---------------------------------------------------------------------------------------------------------------------
# Keep-alive, pipelining, connection handling
# ---------------------------------------------------------------------------------------------------------------------


async def test_served_by_uvicorns_zttp_protocol(server: LightningStoreServer, conn: Conn) -> None:
    from uvicorn.protocols.http.zttp_impl import ZttpProtocol

    await conn.send(HEALTH)
    response = await conn.response()
    assert response.status == 200 and response.json() == {"status": "ok"}
    assert [type(c) for c in server_state(server).connections] == [ZttpProtocol]
    # uvicorn's ``server`` header is off, its ``date`` header on (PythonServerLauncherArgs.server_header/date_header)
    assert response.header("server") is None and response.header("date")


@pytest.mark.parametrize("zttp_installed", [True, False], ids=["zttp-installed", "zttp-missing"])
async def test_request_heads_are_bounded_by_default(monkeypatch: pytest.MonkeyPatch, zttp_installed: bool) -> None:
    """The default protocol bounds request heads: zttp where it is installed (Python >= 3.11, a core dependency),
    otherwise h11 bounded at DEFAULT_H11_MAX_HEADER_BYTES -- never an unbounded head."""
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.zttp_impl import ZttpProtocol

    from rollouthub.utils import server_launcher

    if not zttp_installed:
        monkeypatch.setitem(sys.modules, "zttp", None)  # import zttp -> ImportError, as on Python 3.10
    assert server_launcher.zttp_available() is zttp_installed
    srv = await start()
    try:
        conn = await Conn.open(srv.server_launcher.port)
        await conn.send(request("GET", "/v1/agl/health", headers=[("X-Fine", "a" * 8000)]))
        assert (await conn.response()).status == 200
        expected = ZttpProtocol if zttp_installed else H11Protocol
        assert [type(c) for c in server_state(srv).connections] == [expected]
        conn.close()
        big = await Conn.open(srv.server_launcher.port)
        filler = [(f"X-{i}", "b" * 1000) for i in range(4 * server_launcher.DEFAULT_H11_MAX_HEADER_BYTES // 1000)]
        received = b""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # zttp answers 400, then resets
            await big.send(request("GET", "/v1/agl/health", headers=filler))
            while chunk := await asyncio.wait_for(big.reader.read(65536), 10):  # until the server closes
                received += chunk
        assert received == b"" or received.startswith(b"HTTP/1.1 400 "), received[:100]
        big.close()
    finally:
        await srv.stop()


def test_max_header_bytes_selects_h11() -> None:
    from rollouthub.utils.server_launcher import http_protocol

    assert http_protocol(8192) == ("h11", 8192)
    assert http_protocol(None) == ("zttp", None)


async def test_keep_alive_reuses_the_connection(server: LightningStoreServer, conn: Conn) -> None:
    for _ in range(3):
        await conn.send(request("POST", "/v1/agl/workers/w1", b'{"heartbeat_stats": {"cpu": 1}}'))
        assert (await conn.response()).json()["heartbeat_stats"] == {"cpu": 1}
        await conn.send(request("GET", "/v1/agl/statistics"))
        assert (await conn.response()).json()["total_workers"] == 1
    assert len(server_state(server).connections) == 1
    assert server_state(server).total_requests >= 6


async def test_pipelined_requests_are_answered_in_order(server: LightningStoreServer, conn: Conn) -> None:
    rollout = await server.start_rollout(input=1)
    wait = json.dumps({"rollout_ids": [rollout.rollout_id], "timeout": 0.2}).encode()
    batch = [
        request("POST", "/v1/agl/waits/rollouts", wait),  # answered last of all if not kept in order
        request("GET", "/v1/agl/statistics"),
        request("POST", "/v1/agl/workers/w-2", b"{}"),
        request("GET", f"/v1/agl/rollouts/{rollout.rollout_id}"),
        request("POST", "/v1/agl/spans", b'{"x": 1}'),  # 422
        HEALTH,
    ]
    await conn.send(b"".join(batch))
    responses = [await conn.response() for _ in batch]
    assert [r.status for r in responses] == [200, 200, 200, 200, 422, 200]
    assert responses[0].json() == []
    assert "total_rollouts" in responses[1].json()
    assert responses[2].json()["worker_id"] == "w-2"
    assert responses[3].json()["rollout_id"] == rollout.rollout_id
    assert responses[5].json() == {"status": "ok"}


async def test_connection_close_and_http_1_0(server: LightningStoreServer) -> None:
    port = server.server_launcher.port
    for raw in (
        request("GET", "/v1/agl/health", headers=[("Connection", "close")]),
        request("GET", "/v1/agl/health", version="1.0"),
        request("GET", "/v1/agl/statistics", version="1.0"),
        request("POST", "/v1/agl/workers/w", b"{}", headers=[("Connection", "close")]),
    ):
        conn = await Conn.open(port)
        try:
            await conn.send(raw)
            response = await conn.response()
            assert response.status == 200 and response.header("connection") == "close"
            assert await conn.closed_by_server()
        finally:
            conn.close()


async def test_malformed_request_is_a_400_and_closes(server: LightningStoreServer, conn: Conn) -> None:
    await conn.send(b"NOT HTTP AT ALL\r\n\r\n")
    response = await conn.response()
    assert response.status == 400 and response.body == b"Invalid HTTP request received."
    assert response.header("connection") == "close"  # uvicorn's own answer (zttp protocol)
    assert await conn.closed_by_server()


async def test_websocket_upgrade_is_answered_as_plain_http(server: LightningStoreServer, conn: Conn) -> None:
    await conn.send(request("GET", "/v1/agl/health", headers=[("Connection", "Upgrade"), ("Upgrade", "websocket")]))
    response = await conn.response()
    assert response.status == 200 and response.json() == {"status": "ok"}


@pytest.mark.parametrize("mode,n_workers", [("thread", 1), ("mp", 1), ("mp", 2)])
async def test_every_launch_mode_serves_over_keep_alive(tmp_path: Path, mode: str, n_workers: int) -> None:
    """Thread, process and multi-worker servers answer pipelined requests on one connection."""
    from rollouthub.store.sql import SqlLightningStore

    store: Any = InMemoryLightningStore(thread_safe=True)
    if mode == "mp":
        store = SqlLightningStore(f"sqlite:///{tmp_path}/store.db")
    srv = LightningStoreServer(store, host="127.0.0.1", port=pick_free_port(), launch_mode=mode, n_workers=n_workers)
    await srv.start()
    try:
        conn = await Conn.open(srv.server_launcher.port)
        try:
            await conn.send(request("POST", "/v1/agl/workers/w", b"{}") + HEALTH)
            assert [(await conn.response()).status for _ in range(2)] == [200, 200]
        finally:
            conn.close()
    finally:
        await srv.stop()


async def test_idle_connection_closes_after_the_keep_alive_timeout() -> None:
    args = PythonServerLauncherArgs(
        host="127.0.0.1", port=pick_free_port(), launch_mode="asyncio", healthcheck_url="/v1/agl/health"
    )
    args.timeout_keep_alive = 1
    async with running(launcher_args=args) as srv:
        conn = await Conn.open(srv.server_launcher.port)
        try:
            await conn.send(HEALTH)
            await conn.response()
            t0 = time.monotonic()
            assert await conn.closed_by_server()
            assert 0.9 <= time.monotonic() - t0 < 5
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------------------------------
# Request bodies
# ---------------------------------------------------------------------------------------------------------------------


async def test_chunked_request_bodies(server: LightningStoreServer, conn: Conn) -> None:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    await conn.send(head % b"/v1/agl/rollouts" + chunked([b'{"inp', b'ut": ', b'{"q": 7}}']))
    response = await conn.response()
    assert response.status == 201 and response.json()["input"] == {"q": 7}
    await conn.send(head % b"/v1/agl/workers/search" + chunked([b'{"lim', b'it": 5}']))
    response = await conn.response()
    assert response.status == 200 and response.json()["limit"] == 5


async def test_body_arriving_in_pieces(server: LightningStoreServer, conn: Conn) -> None:
    body = b'{"heartbeat_stats": {"k": "' + b"v" * 1000 + b'"}}'
    raw = request("POST", "/v1/agl/workers/w-pieces", body)
    for i in range(0, len(raw), 97):
        await conn.send(raw[i : i + 97])
    response = await conn.response()
    assert response.status == 200 and response.json()["heartbeat_stats"]["k"] == "v" * 1000


async def test_expect_100_continue(server: LightningStoreServer, conn: Conn) -> None:
    rollout = await server.start_rollout(input=1)
    for path, body, status in (
        ("/v1/agl/rollouts", b'{"input": 2}', 201),
        (f"/v1/agl/rollouts/{rollout.rollout_id}", b'{"metadata": {"m": 1}}', 200),
    ):
        raw = request("POST", path, body, headers=[("Expect", "100-continue")])
        await conn.send(raw[: -len(body)])  # headers only: wait for the interim response
        assert await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        await conn.send(body)
        assert (await conn.response()).status == status


async def test_declared_body_over_the_limit_is_a_413(server: LightningStoreServer, conn: Conn) -> None:
    body = json.dumps({"input": "x" * (2 * LIMIT)}).encode()
    await conn.send(request("POST", "/v1/agl/rollouts", body))
    response = await conn.response()
    assert response.status == 413
    assert response.json() == {"detail": f"Request body too large (limit {LIMIT} bytes)"}
    await conn.send(HEALTH)  # the rest of the body was read and dropped: the connection is still in sync
    assert (await conn.response()).json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/v1/agl/rollouts", "/v1/traces", "/v1/agl/rollouts/search/attempts"])
async def test_streamed_body_over_the_limit_is_a_413(server: LightningStoreServer, conn: Conn, path: str) -> None:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    await conn.send(head % path.encode() + chunked([b"y" * 1024] * 8))
    response = await conn.response()
    assert response.status == 413 and "too large" in response.json()["detail"]
    await conn.send(HEALTH)
    assert (await conn.response()).json() == {"status": "ok"}


async def test_client_disconnect_mid_body(server: LightningStoreServer) -> None:
    port = server.server_launcher.port
    state = server_state(server)
    for path in ("/v1/agl/rollouts", "/v1/agl/workers/w", "/v1/traces"):
        conn = await Conn.open(port)
        await conn.send(request("POST", path, b'{"input": "' + b"z" * 1000 + b'"}')[:-500])
        await until(lambda: len(state.connections) == 1 and bool(state.tasks))
        conn.close()
        await until(lambda: not state.connections and not state.tasks)
    assert (await server.statistics())["total_rollouts"] == 0
    conn = await Conn.open(port)
    try:
        await conn.send(HEALTH)
        assert (await conn.response()).status == 200
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------------------------------


async def test_head_has_no_body(server: LightningStoreServer, conn: Conn) -> None:
    await conn.send(request("GET", "/openapi.json"))
    full = await conn.response()
    await conn.send(request("HEAD", "/openapi.json") + HEALTH)
    head = await conn.response(head=True)
    assert head.status == 200 and head.header("content-length") == str(len(full.body)) and head.body == b""
    assert (await conn.response()).json() == {"status": "ok"}  # right after the head: no body bytes in between


async def test_big_span_query(server: LightningStoreServer, conn: Conn) -> None:
    rollout = await server.start_rollout(input=1)
    spans = [
        Span.from_attributes(
            attributes={"blob": "b" * 4000},
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            sequence_id=i,
        )
        for i in range(1, 501)
    ]
    await server.add_many_spans(spans)
    await conn.send(request("GET", f"/v1/agl/spans?rollout_id={rollout.rollout_id}&limit=-1"))
    response = await conn.response()
    assert response.status == 200 and len(response.body) > 2_000_000
    assert len(response.json()["items"]) == 500


async def test_store_errors_keep_their_shapes(server: LightningStoreServer, conn: Conn) -> None:
    await conn.send(request("POST", "/v1/agl/rollouts/ro-missing/attempts/latest", b'{"status": "failed"}'))
    response = await conn.response()
    assert response.status == 400 and response.json()["error_type"] == "ValueError"

    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("kaputt")

    server.store.update_worker = boom  # type: ignore[union-attr,method-assign]
    await conn.send(request("POST", "/v1/agl/workers/w", b"{}"))
    response = await conn.response()
    assert response.status == 500 and response.json()["error_type"] == "KeyError"
    await conn.send(HEALTH)  # a mapped error leaves the connection usable
    assert (await conn.response()).status == 200


async def test_auth_on_the_wire() -> None:
    async with running(api_token="tok") as srv:
        conn = await Conn.open(srv.server_launcher.port)
        try:
            await conn.send(request("POST", "/v1/agl/workers/w", b"{}"))
            response = await conn.response()
            assert response.status == 401 and response.header("www-authenticate") == "Bearer"
            await conn.send(request("POST", "/v1/agl/workers/w", b"{}", headers=[("Authorization", "Bearer tok")]))
            assert (await conn.response()).status == 200
        finally:
            conn.close()


async def test_cors_on_the_wire() -> None:
    async with running(cors_allow_origins=["http://a.example"]) as srv:
        conn = await Conn.open(srv.server_launcher.port)
        try:
            origin = [("Origin", "http://a.example")]
            await conn.send(request("POST", "/v1/agl/workers/w", b"{}", headers=origin))
            response = await conn.response()
            assert response.status == 200 and response.header("access-control-allow-origin") == "http://a.example"
            preflight = origin + [("Access-Control-Request-Method", "POST")]
            await conn.send(request("OPTIONS", "/v1/agl/spans", headers=preflight))
            assert (await conn.response()).status == 200
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------------------------------
# Shutdown
# ---------------------------------------------------------------------------------------------------------------------


async def test_shutdown_finishes_the_in_flight_wait_then_closes() -> None:
    srv = await start()
    port = srv.server_launcher.port
    rollout = await srv.start_rollout(input=1)
    idle, busy = await Conn.open(port), await Conn.open(port)
    stopping: Optional[asyncio.Task[None]] = None
    try:
        await idle.send(HEALTH)
        await idle.response()
        wait = json.dumps({"rollout_ids": [rollout.rollout_id], "timeout": 30}).encode()
        await busy.send(request("POST", "/v1/agl/waits/rollouts", wait))
        state = server_state(srv)
        await until(lambda: len(state.tasks) == 1)
        stopping = asyncio.create_task(srv.stop())
        assert await idle.closed_by_server()  # idle connections close at once
        await srv.store.update_attempt(rollout.rollout_id, "latest", status="succeeded")  # type: ignore[union-attr]
        response = await busy.response()  # the in-flight request still completes...
        assert response.status == 200 and response.json()[0]["rollout_id"] == rollout.rollout_id
        assert await busy.closed_by_server()  # ...then its connection closes (zttp sends no "Connection: close")
        await asyncio.wait_for(stopping, 10)
    finally:
        idle.close()
        busy.close()
        if stopping is None:
            await srv.stop()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=0.5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.timeout(90)
def test_cli_sigterm_with_a_request_in_flight(tmp_path: Path) -> None:
    """A wait that outlasts the graceful-shutdown timeout is cut with a 500; the CLI exits 0 without a traceback."""
    import socket

    port = pick_free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("ROLLOUTHUB_API_TOKEN", None)
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", "memory", "--port", str(port)]
    process = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not _healthy(port):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        created = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/agl/rollouts",
            data=b'{"input": 1}',
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(created, timeout=5) as r:
            rollout_id = json.loads(r.read())["rollout_id"]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(request("POST", "/v1/agl/waits/rollouts", json.dumps({"rollout_ids": [rollout_id]}).encode()))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/statistics", timeout=5):
                pass  # the wait's connection is established and its request sent before the signal
            process.send_signal(signal.SIGTERM)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = stderr.decode()
    assert process.returncode == 0, text
    assert "Traceback" not in text, text
    assert data.startswith(b"HTTP/1.1 500 ")  # and the server closed the connection: the read loop above ended
    assert "Cancelled POST /v1/agl/waits/rollouts" in text
