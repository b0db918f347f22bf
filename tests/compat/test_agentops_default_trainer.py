"""Issue 17 item 0: with ``agentops`` installed, the default trainer against a ``rollouthub store`` process works.

Runs in the agentops leg of CI (``ROLLOUTHUB_TEST_REQUIRE_AGENTOPS=1`` with the ``[agentops]`` extra installed, see
``.ci/run``), where it cannot be skipped; without the extra the default tracer is the documented OtelTracer fallback,
covered by ``tests/tracer/test_agentops.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, List

import pytest

from rollouthub import Span, TracerTraceToTriplet, find_final_reward
from rollouthub.instrumentation import AGENTOPS_INSTALLED
from rollouthub.testing import MockOpenAIServer, store_process, text_token_ids

pytestmark = pytest.mark.skipif(not AGENTOPS_INSTALLED, reason="needs the optional agentops extra (CI agentops leg)")

CHILD = Path(__file__).with_name("_agentops_trainer_child.py")


class _HostedServiceStandIn:
    """A loopback HTTP server standing in for the hosted AgentOps service; it records every request it gets."""

    def __init__(self) -> None:
        self.requests: List[str] = []
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorded.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(500)
                self.end_headers()

            do_GET = do_POST = do_PUT = _record

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hosted_service() -> Iterator[_HostedServiceStandIn]:
    service = _HostedServiceStandIn()
    try:
        yield service
    finally:
        service.close()


def test_default_trainer_with_agentops_against_a_store_process(hosted_service: _HostedServiceStandIn) -> None:
    n_runners = 2
    with store_process() as store_url, MockOpenAIServer("four") as llm:
        env = {
            **os.environ,
            # Where AgentOps would send its data if it were not kept local: nothing may arrive there.
            "AGENTOPS_API_ENDPOINT": hosted_service.url,
            "AGENTOPS_EXPORTER_ENDPOINT": hosted_service.url + "/v1/traces",
        }
        env.pop("AGENTOPS_API_KEY", None)
        proc = subprocess.run(
            [sys.executable, str(CHILD), store_url, llm.base_url, str(n_runners)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])

    assert result["tracer"] == "AgentOpsTracer"
    assert len(result["statuses"]) == n_runners
    assert set(result["statuses"].values()) == {"succeeded"}, proc.stderr[-5000:]
    for rollout_id, raw_spans in result["spans"].items():
        spans = [Span.model_validate(s) for s in raw_spans]
        names = [s.name for s in spans]
        # AgentOps' session span, its OpenAI instrumentation, and the reward, all sent over OTLP to the store.
        assert any(name.endswith(".session") for name in names), names
        assert "openai.chat.completion" in names, names
        assert find_final_reward(spans) == 1.0
        assert all(s.rollout_id == rollout_id for s in spans)
        triplets = TracerTraceToTriplet().adapt(spans)
        assert len(triplets) == 1
        assert triplets[0].response["token_ids"] == text_token_ids("four")
        assert triplets[0].prompt["token_ids"], "prompt token ids captured from AgentOps' chat span"
        assert triplets[0].reward == 1.0
    assert hosted_service.requests == []
