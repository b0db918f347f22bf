"""``PythonServerLauncher``: asyncio / thread / mp modes, readiness, port conflicts, pickling."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import time
import urllib.request
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rollouthub.utils.server_launcher import (
    ChildEvent,
    PythonServerLauncher,
    PythonServerLauncherArgs,
    bind_socket,
    noop_context,
    pick_free_port,
)

pytestmark = pytest.mark.timeout(60)


async def _pid(request: Request) -> JSONResponse:
    return JSONResponse({"pid": os.getpid()})


async def _health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


APP = Starlette(routes=[Route("/pid", _pid), Route("/health", _health)])


def _get(url: str) -> Any:
    import json

    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _args(mode: str, **kwargs: Any) -> PythonServerLauncherArgs:
    return PythonServerLauncherArgs(
        host="127.0.0.1",
        port=pick_free_port(),
        launch_mode=mode,
        healthcheck_url="health",
        **kwargs,  # type: ignore[arg-type]
    )


def test_properties_and_defaults(caplog: pytest.LogCaptureFixture) -> None:
    args = PythonServerLauncherArgs()
    assert (args.launch_mode, args.n_workers, args.startup_timeout, args.timeout_keep_alive) == ("asyncio", 1, 60.0, 30)
    launcher = PythonServerLauncher(APP, PythonServerLauncherArgs(host="127.0.0.1", port=1234, healthcheck_url="h"))
    assert launcher.endpoint == launcher.access_endpoint == "http://127.0.0.1:1234"
    assert launcher.health_url == "http://127.0.0.1:1234/h"
    assert PythonServerLauncher(APP, PythonServerLauncherArgs(host="127.0.0.1", port=1)).health_url is None
    free = PythonServerLauncher(APP, PythonServerLauncherArgs(host="127.0.0.1"))
    assert free.port > 0
    wildcard = PythonServerLauncher(APP, PythonServerLauncherArgs(port=5))
    assert wildcard.host == "0.0.0.0" and wildcard.access_host != "0.0.0.0"
    explicit = PythonServerLauncher(APP, PythonServerLauncherArgs(host="0.0.0.0", port=5, access_host="example"))
    assert explicit.access_endpoint == "http://example:5"
    assert ChildEvent("ready").kind == "ready"


async def plain_asgi_app(scope: Any, receive: Any, send: Any) -> None:
    """A picklable (module-level) ASGI app."""


def test_pickling_keeps_configuration_only() -> None:
    launcher = PythonServerLauncher(plain_asgi_app, _args("thread"), serve_context=noop_context)
    clone = pickle.loads(pickle.dumps(launcher))
    assert (clone.host, clone.port, clone.access_host) == (launcher.host, launcher.port, launcher.access_host)
    assert clone.args == launcher.args and not clone.is_running() and clone.app is plain_asgi_app


@pytest.mark.parametrize("mode", ["asyncio", "thread", "mp"])
async def test_start_serve_stop(mode: str) -> None:
    launcher = PythonServerLauncher(APP, _args(mode))
    started = time.monotonic()
    await launcher.start()
    try:
        assert time.monotonic() - started < 10
        assert launcher.is_running()
        pid = (await asyncio.to_thread(_get, launcher.access_endpoint + "/pid"))["pid"]
        assert (pid == os.getpid()) == (mode != "mp")
        with pytest.raises(RuntimeError):
            await launcher.start()
    finally:
        await launcher.stop()
    assert not launcher.is_running()
    with pytest.raises(OSError):
        await asyncio.to_thread(_get, launcher.access_endpoint + "/pid")
    await launcher.start()  # the port can be reused right away
    await launcher.reload()
    assert launcher.is_running()
    await launcher.stop()


async def test_mp_with_several_workers() -> None:
    launcher = PythonServerLauncher(APP, _args("mp", n_workers=2))
    await launcher.start()
    try:
        pids = set()
        for _ in range(40):
            # a fresh connection each time so that the kernel can pick either worker
            pids.add((await asyncio.to_thread(_get, launcher.access_endpoint + "/pid"))["pid"])
            if len(pids) == 2:
                break
        assert os.getpid() not in pids and len(pids) >= 1
        supervisor = launcher._process
        assert supervisor is not None and supervisor.pid not in pids
    finally:
        await launcher.stop()
    assert not launcher.is_running()


@pytest.mark.parametrize("mode", ["asyncio", "thread", "mp"])
async def test_port_in_use_fails_immediately(mode: str) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        args = PythonServerLauncherArgs(host="127.0.0.1", port=blocker.getsockname()[1], launch_mode=mode)  # type: ignore[arg-type]
        launcher = PythonServerLauncher(APP, args)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="did not start up within .*address already in use"):
            await launcher.start()
        assert time.monotonic() - started < 1.0
        assert not launcher.is_running()


def test_bind_socket_reports_conflicts() -> None:
    sock = bind_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        with pytest.raises(RuntimeError, match="address already in use"):
            bind_socket("127.0.0.1", port)
    finally:
        sock.close()


async def test_unhealthy_server_is_stopped() -> None:
    args = PythonServerLauncherArgs(
        host="127.0.0.1", port=pick_free_port(), healthcheck_url="/missing", startup_timeout=0.5
    )
    launcher = PythonServerLauncher(APP, args)
    with pytest.raises(RuntimeError, match="not healthy"):
        await launcher.start()
    assert not launcher.is_running()


async def test_run_forever_cancellation_stops_gracefully() -> None:
    launcher = PythonServerLauncher(APP, _args("thread"))
    task = asyncio.create_task(launcher.run_forever())
    deadline = time.monotonic() + 10
    while not launcher.is_running():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.to_thread(_get, launcher.access_endpoint + "/health")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not launcher.is_running()


async def test_serve_context_wraps_serving() -> None:
    import contextlib

    events: list[str] = []

    @contextlib.asynccontextmanager
    async def context() -> Any:
        events.append("enter")
        yield
        events.append("exit")

    launcher = PythonServerLauncher(APP, _args("asyncio"), serve_context=context)
    await launcher.start()
    await launcher.stop()
    assert events == ["enter", "exit"]
