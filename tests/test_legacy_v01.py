"""The deprecated v0.1 names stay importable where the reference had them, warn, and fail clearly when used."""

from __future__ import annotations

import pytest

import rollouthub as agl
from rollouthub.client import AgentLightningClient, DevTaskLoader
from rollouthub.server import AgentLightningServer, ServerDataStore


def test_top_level_exports_are_the_shims() -> None:
    assert agl.AgentLightningClient is AgentLightningClient
    assert agl.AgentLightningServer is AgentLightningServer
    assert agl.DevTaskLoader is DevTaskLoader
    assert {"AgentLightningClient", "AgentLightningServer", "DevTaskLoader"} <= set(agl.__all__)


def test_server_keeps_its_settings_and_refuses_to_start() -> None:
    with pytest.warns(DeprecationWarning, match="LightningStoreServer"):
        server = AgentLightningServer(port=8123)
    assert (server.host, server.port, server.task_timeout_seconds) == ("127.0.0.1", 8123, 300.0)
    with pytest.raises(NotImplementedError, match=r"AgentLightningServer\.start is not supported"):
        server.start()


@pytest.mark.parametrize(
    ("factory", "operation", "replacement"),
    [
        (lambda: AgentLightningClient("http://localhost:8000"), "poll_next_task", "LightningStoreClient"),
        (lambda: AgentLightningClient("http://localhost:8000"), "post_rollout_async", "LitAgentRunner"),
        (lambda: DevTaskLoader([{"q": 1}], {}), "get_latest_resources", "Trainer.dev"),
        (lambda: ServerDataStore(), "add_task", "InMemoryLightningStore"),
    ],
)
def test_operations_raise_naming_the_replacement(factory: object, operation: str, replacement: str) -> None:
    with pytest.warns(DeprecationWarning):
        shim = factory()  # type: ignore[operator]
    with pytest.raises(NotImplementedError, match=replacement):
        getattr(shim, operation)()


def test_client_settings() -> None:
    with pytest.warns(DeprecationWarning):
        client = AgentLightningClient("http://localhost:9", poll_interval=1.0, timeout=2.0)
    assert (client.endpoint, client.poll_interval, client.timeout) == ("http://localhost:9", 1.0, 2.0)
