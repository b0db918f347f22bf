"""``rollouthub.testing.store_process``: a real ``rollouthub store`` subprocess for integration tests."""

from __future__ import annotations

import socket

import pytest

from rollouthub.testing import store_is_healthy, store_process
from rollouthub.utils.server_launcher import pick_free_port


def test_store_process_serves_until_the_block_ends() -> None:
    port = pick_free_port()
    with store_process(port) as url:
        assert url == f"http://127.0.0.1:{port}" and store_is_healthy(url)
        with pytest.raises(RuntimeError, match="already answers"):
            with store_process(port):
                pass  # pragma: no cover - never reached
    assert not store_is_healthy(url)


def test_store_process_reports_a_server_that_exits_early() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match="exited early"):
            with store_process(taken.getsockname()[1]):
                pass  # pragma: no cover - never reached
