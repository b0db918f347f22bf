"""Property-based fuzzing of the store server against its own OpenAPI document (schemathesis + hypothesis).

Every operation gets positive (schema-conforming) and negative (schema-violating) generated requests; the server must
never answer with a 5xx. The total number of requests is asserted to be at least 500.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
requests = pytest.importorskip("requests")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from rollouthub.store.client_server import LightningStoreServer  # noqa: E402
from rollouthub.store.memory import InMemoryLightningStore  # noqa: E402
from rollouthub.utils.server_launcher import pick_free_port  # noqa: E402

pytestmark = pytest.mark.timeout(180)

EXAMPLES_PER_MODE = 12
MIN_REQUESTS = 500


@pytest.fixture(scope="module")
def live_server() -> Iterator[LightningStoreServer]:
    server = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0),
        host="127.0.0.1",
        port=pick_free_port(),
        launch_mode="thread",
        max_body_bytes=64 * 1024,
    )
    loop = asyncio.new_event_loop()
    loop.run_until_complete(server.start())
    try:
        # Seed a little data so that lookups by id sometimes hit something.
        loop.run_until_complete(server.start_rollout(input={"seed": True}, worker_id="seed-worker"))
        loop.run_until_complete(server.enqueue_rollout(input={"seed": 2}))
        yield server
    finally:
        loop.run_until_complete(server.stop())
        loop.close()


def _tame(case: Any) -> Any:
    """Keep generated requests from blocking: ``wait_for_rollouts`` gets a zero timeout."""
    if case.operation.path.endswith("/waits/rollouts") and isinstance(case.body, dict):
        case.body["timeout"] = 0
    return case


def _intentional_501(case: Any, status: int) -> bool:
    """OTLP metrics/logs/profiles are documented as 501 Not Implemented (store.md 11.7)."""
    return status == 501 and case.operation.path in ("/v1/metrics", "/v1/logs", "/v1/development/profiles")


def test_no_5xx_for_generated_requests(live_server: LightningStoreServer) -> None:
    schema = schemathesis.openapi.from_dict(live_server.app.openapi())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30
    session = requests.Session()
    base_url = live_server.endpoint
    failures: list[str] = []
    counter = {"requests": 0}
    lock = threading.Lock()
    started = time.monotonic()

    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES_PER_MODE,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                case = _tame(case)
                response = case.call(base_url=base_url, session=session, timeout=10)
                with lock:
                    counter["requests"] += 1
                if response.status_code >= 500 and not _intentional_501(case, response.status_code):
                    failures.append(
                        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}\n"
                        f"  body={case.body!r} query={case.query!r}"
                    )

            try:
                check()
            except Unsatisfiable:
                pass  # e.g. no negative variant exists for a parameter-less operation

    elapsed = time.monotonic() - started
    assert not failures, "\n".join(failures[:20])
    assert counter["requests"] >= MIN_REQUESTS, counter
    print(f"fuzz: {counter['requests']} requests over {len(operations)} operations in {elapsed:.1f} s")
    assert elapsed < 150, f"fuzzing took {elapsed:.1f} s"
