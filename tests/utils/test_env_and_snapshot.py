"""``rollouthub.env_var`` resolvers and ``system_snapshot()``."""

from __future__ import annotations

import pytest

from rollouthub.env_var import (
    API_TOKEN_ENV,
    LightningEnvVar,
    resolve_api_token,
    resolve_bool_env_var,
    resolve_int_env_var,
    resolve_str_env_var,
)
from rollouthub.utils.system_snapshot import system_snapshot


def test_enum_members() -> None:
    assert [m.value for m in LightningEnvVar] == [
        "AGL_EMITTER_DEBUG",
        "AGL_MANAGED_STORE",
        "AGL_CURRENT_ROLE",
        "AGL_SERVER_HOST",
        "AGL_SERVER_PORT",
    ]
    assert all(m.name == m.value for m in LightningEnvVar)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1", True),
        (" TRUE ", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("NO", False),
        ("off ", False),
    ],
)
def test_bool_values(monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", raw)
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE) is expected


def test_bool_override_fallback_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_MANAGED_STORE", raising=False)
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE) is None
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, fallback=True) is True
    monkeypatch.setenv("AGL_MANAGED_STORE", "maybe")
    assert resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, override=False) is False
    with pytest.raises(ValueError, match="AGL_MANAGED_STORE"):
        resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE)


def test_int_and_str(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_SERVER_PORT", raising=False)
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, fallback=4747) == 4747
    monkeypatch.setenv("AGL_SERVER_PORT", " 8080 ")
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT) == 8080
    assert resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, override=1) == 1
    monkeypatch.setenv("AGL_SERVER_PORT", "eighty")
    with pytest.raises(ValueError, match="AGL_SERVER_PORT must be an integer"):
        resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT)
    monkeypatch.delenv("AGL_SERVER_HOST", raising=False)
    assert resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST, fallback="localhost") == "localhost"
    monkeypatch.setenv("AGL_SERVER_HOST", " host ")
    assert resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST) == " host "


def test_api_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_TOKEN_ENV, raising=False)
    assert resolve_api_token() is None
    monkeypatch.setenv(API_TOKEN_ENV, "")
    assert resolve_api_token() is None
    monkeypatch.setenv(API_TOKEN_ENV, "abc")
    assert resolve_api_token() == "abc" and resolve_api_token("xyz") == "xyz"


def test_system_snapshot_keys() -> None:
    snapshot = system_snapshot()
    assert set(snapshot) == {
        "timestamp",
        "host",
        "os",
        "cpu_name",
        "cpu_cores",
        "cpu_threads",
        "cpu_usage_pct",
        "mem_used_gb",
        "mem_total_gb",
        "mem_pct",
        "disk_used_gb",
        "disk_total_gb",
        "disk_pct",
        "bytes_sent_mb",
        "bytes_recv_mb",
    }
    assert snapshot["mem_total_gb"] > 0 and len(snapshot["timestamp"]) == 19
    with_gpu = system_snapshot(include_gpu=True)
    assert isinstance(with_gpu["gpus"], list)
