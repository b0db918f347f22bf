"""While the hosted AgentOps service is disabled, AgentOps' upload client answers locally (agentops leg of CI)."""

from __future__ import annotations

from typing import Iterator

import pytest

from rollouthub.instrumentation import AGENTOPS_INSTALLED
from rollouthub.instrumentation.agentops import enable_agentops_service, instrument_agentops, uninstrument_agentops

pytestmark = pytest.mark.skipif(not AGENTOPS_INSTALLED, reason="needs the optional agentops extra (CI agentops leg)")


@pytest.fixture
def instrumented() -> Iterator[None]:
    enable_agentops_service(False)
    instrument_agentops()
    yield
    uninstrument_agentops()
    enable_agentops_service(False)


def test_the_upload_client_answers_an_empty_json_200_without_a_request(instrumented: None) -> None:
    from agentops.client.api.versions.v4 import V4Client

    client = V4Client("http://127.0.0.1:9")  # nothing listens there: a real request would fail
    response = client.post("/v4/objects/upload/", b"body", {})

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {}
    assert response.content == b"{}"
