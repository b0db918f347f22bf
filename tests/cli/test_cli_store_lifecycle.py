"""``rollouthub store`` lifecycle (issue 29, items 1, 3, 6): who answers on the port, one-line start-up errors, the
start-up line, and no server process outliving its owner."""

from __future__ import annotations

import functools
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, List, Tuple

import psutil
import pytest

from rollouthub.utils.server_launcher import pick_free_port

from .store_process import spawn_store

pytestmark = pytest.mark.timeout(90)


def _health(port: int) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=1) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _healthy(port: int) -> bool:
    return bool(_health(port)["status"] == "ok")


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stop(process: subprocess.Popen[str]) -> Tuple[int, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    return process.returncode, stderr


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_health_reports_the_instance_id_the_starter_chose(tmp_path: Path) -> None:
    port = pick_free_port()
    process = spawn_store(
        tmp_path, "--backend", "memory", "--port", str(port), "--instance-id", "nonce-1234", text=True
    )
    try:
        _wait_until(lambda: _health(port)["status"] == "ok", 30, "the server")
        assert _health(port) == {"status": "ok", "instance_id": "nonce-1234"}
    finally:
        code, stderr = _stop(process)
    assert code == 0 and "Traceback" not in stderr


def test_an_occupied_port_fails_at_once_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        process = spawn_store(tmp_path, "--backend", "memory", "--port", str(port), text=True)
        _, stderr = process.communicate(timeout=30)
        code = process.returncode
    assert code == 1
    assert time.monotonic() - started < 20
    errors = [line for line in stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and f"Cannot bind 127.0.0.1:{port}: address already in use" in errors[0], stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "99999"], "argument --port: invalid port 99999: give a number from 1 to 65535"),
        (["--port", "http"], "argument --port: invalid port 'http'"),
        (["--backend", "no-such-dir/x.db"], "the directory {tmp}/no-such-dir does not exist"),
        (["--backend", "sqlite:///no-such-dir/x.db"], "cannot use the SQLite file {tmp}/no-such-dir/x.db"),
        (["--parent-pid", "0"], "--parent-pid must be a process id"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, args: List[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rollouthub.cli", "store", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("rollouthub store: error:"), result.stderr
    assert message.format(tmp=tmp_path) in result.stderr
    assert not (tmp_path / "no-such-dir").exists()


def _start_line(stderr: str) -> str:
    [line] = [line for line in stderr.splitlines() if "Store backend:" in line]
    return re.sub(r"^.*Store backend:\s*", "", line)


def test_the_start_line_says_created_or_opened_with_n_rollouts(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    for expected_rollouts in (None, 3):
        port = pick_free_port()
        process = spawn_store(tmp_path, "--backend", "runs.db", "--port", str(port), text=True)
        try:
            _wait_until(functools.partial(_healthy, port), 30, "the server")
            if expected_rollouts is None:
                for i in range(3):
                    request = urllib.request.Request(
                        f"http://127.0.0.1:{port}/v1/agl/rollouts",
                        data=json.dumps({"input": i}).encode(),
                        headers={"Content-Type": "application/json"},
                        method="POST",
                    )
                    urllib.request.urlopen(request, timeout=10).close()
        finally:
            code, stderr = _stop(process)
        assert code == 0, stderr
        state = "created" if expected_rollouts is None else f"opened with {expected_rollouts} rollouts"
        assert _start_line(stderr) == f"SQLite file {db} ({state})"


def test_a_store_started_with_parent_pid_stops_cleanly_when_its_owner_is_killed(tmp_path: Path) -> None:
    """The owner is SIGKILLed (no clean-up of its own): its store notices, stops the clean way and exits 0."""
    port = pick_free_port()
    owner = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    process = spawn_store(tmp_path, "--backend", "w.db", "--port", str(port), "--parent-pid", str(owner.pid), text=True)
    try:
        _wait_until(lambda: _health(port)["status"] == "ok", 30, "the server")
        owner.kill()
        owner.wait(10)
        code = process.wait(20)
        stderr = process.stderr.read()  # type: ignore[union-attr]
    finally:
        owner.kill()
        if process.poll() is None:
            process.kill()
    assert code == 0, stderr
    assert "Store server stopped." in stderr
    assert not (tmp_path / "w.db-wal").exists()


def test_n_workers_leave_no_process_when_the_store_is_killed(tmp_path: Path) -> None:
    """SIGKILL of ``rollouthub store --n-workers 2`` (no clean-up possible): its supervisor and workers stop too."""
    port = pick_free_port()
    process = spawn_store(tmp_path, "--backend", "shared.db", "--n-workers", "2", "--port", str(port), text=True)
    try:
        _wait_until(lambda: _health(port)["status"] == "ok", 60, "the server")
        tree = [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
        assert len(tree) == 3, tree  # the supervisor and two workers
        process.kill()
        process.wait(10)
        _wait_until(lambda: all(_gone(pid) for pid in tree), 10, f"the server processes {tree} to stop")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
