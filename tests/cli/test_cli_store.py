"""``rollouthub store`` as a subprocess: start-up time, clean shutdown on SIGINT/SIGTERM, argument errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rollouthub.cli import main as cli_main
from rollouthub.cli.store import DEFAULT_BACKEND, build_parser
from rollouthub.utils.server_launcher import pick_free_port

from .store_process import spawn_store

pytestmark = pytest.mark.timeout(90)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=0.5) as response:
            return response.status == 200
    except OSError:
        return False


def _startup_budget() -> float:
    """2 s as required; more on an overloaded machine (load average above the CPU count)."""
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    return 2.0 if load <= cpus else 2.0 * load / cpus


def _wait_healthy(process: subprocess.Popen[bytes], port: int, timeout: float = 30.0) -> float:
    start = time.monotonic()
    while not _healthy(port):
        if process.poll() is not None:
            raise AssertionError(f"server exited early: {process.communicate()[1].decode()}")
        if time.monotonic() - start > timeout:
            raise AssertionError("server did not become healthy")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_store_starts_fast_and_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    port = pick_free_port()
    process = spawn_store(tmp_path, "--backend", "memory", "--port", str(port))
    try:
        elapsed = _wait_healthy(process, port)
        assert elapsed < _startup_budget(), f"healthy after {elapsed:.2f} s"
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = stderr.decode()
    assert process.returncode == 0, text
    assert "Traceback" not in text
    assert f"Store API:     http://127.0.0.1:{port}/v1/agl" in text
    assert "Dashboard:" in text
    assert not _healthy(port)


def test_memory_with_several_workers_is_refused(tmp_path: Path) -> None:
    process = spawn_store(tmp_path, "--backend", "memory", "--n-workers", "2", "--port", str(pick_free_port()))
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 2
    text = stderr.decode()
    assert "--n-workers > 1" in text and "Traceback" not in text


def test_port_in_use_fails_fast(tmp_path: Path) -> None:
    import socket

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        process = spawn_store(tmp_path, "--backend", "memory", "--port", str(port))
        _, stderr = process.communicate(timeout=30)
    text = stderr.decode()
    assert process.returncode == 1
    assert "address already in use" in text and "Traceback" not in text
    # Issue 18: reported once, in one line, without the meaningless "within 0.00 seconds".
    assert text.count("address already in use") == 1, text
    assert "within" not in text, text
    [line] = [line for line in text.splitlines() if "address already in use" in line]
    assert f"Cannot bind 127.0.0.1:{port}: address already in use." in line


_WITHOUT_PROMETHEUS = (
    "import sys; sys.modules['prometheus_client'] = None; from rollouthub.cli import main; sys.exit(main())"
)


def test_prometheus_tracker_without_the_extra_is_one_line(tmp_path: Path) -> None:
    """Issue 18 (point 5): without the [prometheus] extra, one line naming the extra, quoted for shells."""
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = str(pick_free_port())
    for args in (["store", "--backend", "memory", "--port", port, "--tracker", "prometheus"], ["prometheus"]):
        result = subprocess.run(
            [sys.executable, "-c", _WITHOUT_PROMETHEUS, *args],
            cwd=tmp_path,
            env=dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "pip install 'rollouthub[prometheus]'" in lines[0] and "prometheus-client" in lines[0]
        assert lines[0].startswith(f"rollouthub {args[0]}: error:")


def test_prometheus_tracker_with_the_extra_serves_metrics_with_and_without_slash(tmp_path: Path) -> None:
    """Issue 18 (point 6): ``/v1/prometheus`` answers like ``/v1/prometheus/``."""
    pytest.importorskip("prometheus_client")
    port = pick_free_port()
    process = spawn_store(tmp_path, "--backend", "memory", "--port", str(port), "--tracker", "prometheus")
    try:
        _wait_healthy(process, port)
        for path in ("/v1/prometheus", "/v1/prometheus/"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                assert response.status == 200, path
                assert "agl_http_total" in response.read().decode(), path
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(20)


def test_api_token_from_environment(tmp_path: Path) -> None:
    port = pick_free_port()
    env = dict(os.environ, ROLLOUTHUB_API_TOKEN="tok-123")
    process = subprocess.Popen(
        [sys.executable, "-m", "rollouthub.cli", "store", "--backend", "memory", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_healthy(process, port)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/agl/statistics")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        assert info.value.code == 401
        request.add_header("Authorization", "Bearer tok-123")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(20)
    assert process.returncode == 0


def test_parser_defaults() -> None:
    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.port == 4747 and args.n_workers == 1
    assert args.backend == DEFAULT_BACKEND == "sqlite:///./rollouthub.db"
    assert args.max_body_bytes == 32 * 1024 * 1024 and args.tracker is None and args.cors_origins is None
    args = build_parser().parse_args(["--tracker", "prometheus", "console", "--cors-origin", "a", "--cors-origin", "b"])
    assert args.tracker == ["prometheus", "console"] and args.cors_origins == ["a", "b"]


def test_limit_flags_defaults_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([])
    assert args.memory_limit is None  # --backend memory: min(2 GiB, 25 % of the RAM)
    assert (args.timeout_keep_alive, args.limit_concurrency, args.max_header_bytes) == (30, 2048, None)
    for argv, message in [
        (["--backend", "sqlite:///x.db", "--memory-limit", "1G"], "--memory-limit only applies to --backend memory"),
        (["--backend", "memory", "--memory-limit", "12XB"], "invalid memory limit '12XB'"),
        (["--backend", "memory", "--memory-limit", "0"], "at least 1 byte"),
        (["--limit-concurrency", "0"], "--limit-concurrency must be positive"),
        (["--max-header-bytes", "-1"], "--max-header-bytes must be positive"),
        (["--timeout-keep-alive", "0"], "--timeout-keep-alive must be positive"),
    ]:
        assert cli_main(["store", *argv]) == 2, argv
        assert message in capsys.readouterr().err


def test_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--help"]) == 0
    assert "store" in capsys.readouterr().out
    assert cli_main(["bogus"]) == 2
    assert cli_main(["store", "--backend", "mongodb://x"]) == 2
    assert "unsupported backend" in capsys.readouterr().err


def test_prometheus_cli_configuration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert cli_main(["prometheus", "--port", str(pick_free_port())]) == 1
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/tmp/rollouthub-test-prom")
    assert cli_main(["prometheus", "--metrics-path", "/"]) == 1


def test_prometheus_app_serves_multiprocess_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("prometheus_client")
    import asyncio

    from rollouthub.cli.prometheus import build_app
    from rollouthub.utils.server_launcher import PythonServerLauncher, PythonServerLauncherArgs

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    app = build_app("/v1/prometheus")
    launcher = PythonServerLauncher(
        app, PythonServerLauncherArgs(host="127.0.0.1", port=pick_free_port(), healthcheck_url="/health")
    )

    async def scenario() -> tuple[int, int]:
        await launcher.start()
        try:
            health = await asyncio.to_thread(urllib.request.urlopen, launcher.access_endpoint + "/health")
            metrics = await asyncio.to_thread(urllib.request.urlopen, launcher.access_endpoint + "/v1/prometheus/")
            no_slash = await asyncio.to_thread(urllib.request.urlopen, launcher.access_endpoint + "/v1/prometheus")
            assert no_slash.status == 200
            return health.status, metrics.status
        finally:
            await launcher.stop()

    assert asyncio.run(scenario()) == (200, 200)


def test_several_workers_share_a_sqlite_backend(tmp_path: Path) -> None:
    import json

    port = pick_free_port()
    db = tmp_path / "shared.db"
    pytest.importorskip("prometheus_client")
    process = spawn_store(
        tmp_path, "--backend", f"sqlite:///{db}", "--n-workers", "2", "--port", str(port), "--tracker", "prometheus"
    )
    try:
        _wait_healthy(process, port, timeout=60)
        ids = []
        for i in range(6):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/agl/rollouts",
                data=json.dumps({"input": i}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 201
                ids.append(json.loads(response.read())["rollout_id"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/rollouts", timeout=10) as response:
            listed = {item["rollout_id"] for item in json.loads(response.read())["items"]}
        assert set(ids) <= listed  # every worker sees every write
        expected = 'agl_http_total{method="POST",path="/v1/agl/rollouts",status="201"} 6.0'
        for _ in range(4):  # whichever worker answers the scrape reports the aggregate of all workers
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/prometheus/", timeout=10) as response:
                assert expected in response.read().decode()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "Traceback" not in stderr.decode()
    assert db.exists()


def test_database_of_a_newer_version_fails_the_start_up(tmp_path: Path) -> None:
    """The database is opened (created or checked) before serving: a bad one is a start-up error, not a 500 later."""
    import sqlite3

    from rollouthub.store.collection.sql_schema import SCHEMA_TABLE, SCHEMA_VERSION

    database = tmp_path / "newer.db"
    port = pick_free_port()
    first = spawn_store(tmp_path, "--backend", f"sqlite:///{database}", "--port", str(port))
    try:
        _wait_healthy(first, port)
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=30) == 0
    with sqlite3.connect(database) as conn:
        conn.execute(f"UPDATE {SCHEMA_TABLE} SET version = {SCHEMA_VERSION + 1}")
    process = spawn_store(tmp_path, "--backend", f"sqlite:///{database}", "--port", str(pick_free_port()))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert f"schema version {SCHEMA_VERSION + 1}" in stderr.decode()
