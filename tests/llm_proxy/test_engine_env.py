"""The upstream session trusts the environment only when it configures a proxy or a netrc file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollouthub.llm_proxy.engine import environment_configures_http

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy", "no_proxy")


@pytest.fixture()
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_nothing_configured(bare_env: pytest.MonkeyPatch) -> None:
    assert environment_configures_http() is False


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "http_proxy", "WSS_PROXY"])
def test_a_proxy_variable(bare_env: pytest.MonkeyPatch, name: str) -> None:
    bare_env.setenv(name, "http://127.0.0.1:3128")
    assert environment_configures_http() is True


def test_a_netrc_file(bare_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text("machine example.com login a password b\n")
    assert environment_configures_http() is True


def test_netrc_variable(bare_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "elsewhere"
    bare_env.setenv("NETRC", str(path))
    assert environment_configures_http() is False
    path.write_text("machine example.com login a password b\n")
    assert environment_configures_http() is True
