"""Route-level tests of every REST endpoint of ``LightningStoreServer`` with raw HTTP.

Each test starts a fresh server (in-memory store, asyncio launch mode) on a free loopback port and talks to it with
``aiohttp`` -- no ``LightningStoreClient`` involved except where the client/server interplay itself is under test.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rollouthub.store.base import UNSET
from rollouthub.store.client_server import (
    API_AGL_PREFIX,
    API_V1_AGL_PREFIX,
    API_V1_PREFIX,
    LightningStoreServer,
    QueryRolloutsRequest,
    RolloutRequest,
    UpdateRolloutRequest,
)
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server.errors import template_http_path
from rollouthub.utils.metrics import ConsoleMetricsBackend
from rollouthub.utils.server_launcher import PythonServerLauncherArgs, pick_free_port
from tests.store.helpers import held_by_another_thread

pytestmark = pytest.mark.timeout(60)


class Api:
    """Tiny raw-HTTP helper bound to a server endpoint."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: Any = None,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        prefix: str = API_V1_AGL_PREFIX,
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"params": params, "headers": headers}
        if data is not None:
            kwargs["data"] = data
        elif json is not None:
            kwargs["json"] = json
        async with self.session.request(method, self.base + prefix + path, **kwargs) as response:
            raw = await response.read()
            if response.content_type == "application/json":
                return response.status, (await response.json()) if raw else None
            return response.status, raw

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kwargs)

    async def post(self, path: str, json: Any = None, **kwargs: Any) -> tuple[int, Any]:
        return await self.call("POST", path, json=json, **kwargs)


async def _start(store: Any = None, **kwargs: Any) -> LightningStoreServer:
    server = LightningStoreServer(
        store if store is not None else InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0),
        host="127.0.0.1",
        port=pick_free_port(),
        launch_mode="asyncio",
        **kwargs,
    )
    await server.start()
    return server


@pytest.fixture
async def server() -> AsyncIterator[LightningStoreServer]:
    srv = await _start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def api(server: LightningStoreServer) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, server.endpoint)


async def _enqueue(api: Api, n: int, **extra: Any) -> list[dict[str, Any]]:
    status, body = await api.post(
        "/queues/rollouts/enqueue", {"rollouts": [{"input": {"i": i}, **extra} for i in range(n)]}
    )
    assert status == 201
    return body


# ---------------------------------------------------------------------------------------------------------------------
# Basics, constants, construction
# ---------------------------------------------------------------------------------------------------------------------


def test_prefix_constants() -> None:
    assert (API_V1_PREFIX, API_AGL_PREFIX, API_V1_AGL_PREFIX) == ("/v1", "/agl", "/v1/agl")


def test_request_model_defaults() -> None:
    assert RolloutRequest(input=1).model_dump() == {
        "input": 1,
        "mode": None,
        "resources_id": None,
        "config": None,
        "metadata": None,
        "worker_id": None,
    }
    query = QueryRolloutsRequest()
    assert (query.limit, query.offset, query.sort_order, query.filter_logic) == (-1, 0, "asc", "and")
    assert UpdateRolloutRequest.model_validate({"mode": None}).model_fields_set == {"mode"}


def test_construction_rules() -> None:
    store = InMemoryLightningStore()
    with pytest.raises(ValueError, match="The store does not support zero-copy."):
        LightningStoreServer(store, host="127.0.0.1", port=pick_free_port(), launch_mode="mp")
    args = PythonServerLauncherArgs(host="127.0.0.1", port=pick_free_port(), healthcheck_url="/v1/agl/health")
    with pytest.raises(ValueError, match="cannot be set when launcher_args is provided"):
        LightningStoreServer(store, port=1234, launcher_args=args)
    server = LightningStoreServer(store, launcher_args=args)
    assert server.launcher_args is args
    assert server.server_launcher.health_url == f"http://127.0.0.1:{args.port}/v1/agl/health"
    assert server.endpoint == f"http://127.0.0.1:{args.port}"
    assert server.otlp_traces_endpoint() == f"http://127.0.0.1:{args.port}/v1/traces"
    assert server.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": True}

    class NotAsyncSafe(InMemoryLightningStore):
        @property
        def capabilities(self) -> Any:
            return {"async_safe": False}

    with pytest.raises(ValueError, match="not async-safe"):
        LightningStoreServer(NotAsyncSafe(), host="127.0.0.1", port=pick_free_port())


def test_pickled_server_is_a_thin_proxy() -> None:
    server = LightningStoreServer(InMemoryLightningStore(), host="127.0.0.1", port=pick_free_port())
    state = server.__getstate__()
    assert set(state) == {"launcher_args", "server_launcher", "_owner_pid"}
    clone = pickle.loads(pickle.dumps(server))
    assert clone.store is None and clone.app is None and clone._client is None
    assert clone.endpoint == server.endpoint
    assert clone._owner_pid == server._owner_pid


async def test_health_and_unknown_routes(api: Api) -> None:
    assert await api.get("/health") == (200, {"status": "ok"})
    status, body = await api.get("/does-not-exist")
    assert (status, body) == (404, {"detail": "Not Found"})
    status, _ = await api.call("DELETE", "/health")
    assert status == 405


async def test_statistics(api: Api, server: LightningStoreServer) -> None:
    await _enqueue(api, 1)
    status, body = await api.get("/statistics")
    assert status == 200
    assert body["name"] == "InMemoryLightningStore" and body["total_rollouts"] >= 1
    direct = dict(await server.statistics())
    direct.pop("uptime")
    body.pop("uptime")
    assert body == direct


# ---------------------------------------------------------------------------------------------------------------------
# Queue
# ---------------------------------------------------------------------------------------------------------------------


async def test_enqueue_single_batch_and_empty(api: Api) -> None:
    status, single = await api.post("/queues/rollouts/enqueue", {"rollouts": [{"input": "a", "mode": "train"}]})
    assert status == 201 and len(single) == 1
    assert single[0]["input"] == "a" and single[0]["mode"] == "train" and single[0]["status"] == "queuing"
    status, batch = await api.post(
        "/queues/rollouts/enqueue",
        {"rollouts": [{"input": i, "resources_id": f"r{i}", "metadata": {"k": i}} for i in range(3)]},
    )
    assert status == 201
    assert [r["input"] for r in batch] == [0, 1, 2]
    assert [r["resources_id"] for r in batch] == ["r0", "r1", "r2"]
    assert await api.post("/queues/rollouts/enqueue", {"rollouts": []}) == (201, [])
    status, body = await api.post("/queues/rollouts/enqueue", {})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "rollouts"]


async def test_enqueue_calls_store_at_request_time(api: Api, server: LightningStoreServer) -> None:
    calls: list[Any] = []
    original = server.store.enqueue_rollout  # type: ignore[union-attr]

    async def patched(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return await original(*args, **kwargs)

    server.store.enqueue_rollout = patched  # type: ignore[union-attr,method-assign]
    await _enqueue(api, 1)
    assert len(calls) == 1 and calls[0]["input"] == {"i": 0}


async def test_dequeue_variants(api: Api) -> None:
    await _enqueue(api, 4)
    status, items = await api.post("/queues/rollouts/dequeue", {"limit": 2, "worker_id": "rest-worker"})
    assert status == 200 and len(items) == 2
    assert all(item["attempt"]["worker_id"] == "rest-worker" for item in items)
    status, items = await api.post("/queues/rollouts/dequeue")
    assert status == 200 and len(items) == 1 and items[0]["status"] == "preparing"
    status, items = await api.post("/queues/rollouts/dequeue", {"limit": 0})
    assert (status, items) == (200, [])
    status, items = await api.post("/queues/rollouts/dequeue", {"limit": 5})
    assert status == 200 and len(items) == 1  # the limit-0 call left it queued
    assert await api.post("/queues/rollouts/dequeue") == (200, [])


async def test_dequeue_timeout_is_validated(api: Api) -> None:
    status, body = await api.post("/queues/rollouts/dequeue", {"limit": 2, "timeout": 1.0})
    assert status == 400 and "timeout is only supported with limit 1" in body["detail"]
    status, _ = await api.post("/queues/rollouts/dequeue", {"timeout": -1})
    assert status == 422  # request validation, as for every other malformed body
    status, _ = await api.post("/queues/rollouts/dequeue", {"timeout": "soon"})
    assert status == 422
    assert await api.post("/queues/rollouts/dequeue", {"timeout": 0}) == (200, [])


@pytest.mark.parametrize("cors", [False, True], ids=["front-door", "fastapi"])
async def test_dequeue_timeout_holds_the_request_until_a_rollout_is_queued(cors: bool) -> None:
    server = await _start(cors_allow_origins=["http://example.test"] if cors else None)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.endpoint)
            waiting = asyncio.create_task(api.post("/queues/rollouts/dequeue", {"worker_id": "w", "timeout": 10}))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            (queued,) = await _enqueue(api, 1)
            status, items = await asyncio.wait_for(waiting, timeout=3)
            assert status == 200 and [i["rollout_id"] for i in items] == [queued["rollout_id"]]
            assert items[0]["attempt"]["worker_id"] == "w"
    finally:
        await server.stop()


async def test_dequeue_timeout_on_a_store_that_is_not_thread_safe_waits_without_the_servers_lock() -> None:
    server = await _start(InMemoryLightningStore(thread_safe=False, scan_debounce_seconds=0.0))
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.endpoint)
            waiting = asyncio.create_task(api.post("/queues/rollouts/dequeue", {"worker_id": "w", "timeout": 10}))
            await asyncio.sleep(0.3)
            status, _ = await asyncio.wait_for(api.post("/workers/other", {}), timeout=3)  # not blocked by the wait
            assert status == 200
            (queued,) = await _enqueue(api, 1)
            status, items = await asyncio.wait_for(waiting, timeout=3)
            assert status == 200 and [i["rollout_id"] for i in items] == [queued["rollout_id"]]
    finally:
        await server.stop()


async def test_dequeue_timeout_is_capped(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    import rollouthub.store.wire as wire

    monkeypatch.setattr(wire, "MAX_DEQUEUE_WAIT_SECONDS", 0.3)
    started = asyncio.get_running_loop().time()
    assert await api.post("/queues/rollouts/dequeue", {"timeout": 60}) == (200, [])
    assert asyncio.get_running_loop().time() - started < 3.0


async def test_dequeue_wait_of_a_disconnected_client_claims_nothing(api: Api, server: LightningStoreServer) -> None:
    async with aiohttp.ClientSession() as other:
        request = asyncio.create_task(
            other.post(server.endpoint + API_V1_AGL_PREFIX + "/queues/rollouts/dequeue", json={"timeout": 10})
        )
        await asyncio.sleep(0.3)
        request.cancel()  # the client goes away while the server holds its request
        with pytest.raises(asyncio.CancelledError):
            await request
    await asyncio.sleep(0.3)  # let the server see the connection close
    (queued,) = await _enqueue(api, 1)
    await asyncio.sleep(0.3)
    status, body = await api.get(f"/rollouts/{queued['rollout_id']}")
    assert status == 200 and body["status"] == "queuing"  # not claimed for the client that left
    status, items = await api.post("/queues/rollouts/dequeue")
    assert [i["rollout_id"] for i in items] == [queued["rollout_id"]] and items[0]["attempt"]["sequence_id"] == 1


# ---------------------------------------------------------------------------------------------------------------------
# Rollouts
# ---------------------------------------------------------------------------------------------------------------------


async def test_start_rollout_with_worker(api: Api) -> None:
    status, body = await api.post("/rollouts", {"input": {"q": 1}, "mode": "val", "worker_id": "w-1"})
    assert status == 201
    assert body["mode"] == "val" and body["attempt"]["worker_id"] == "w-1" and body["attempt"]["sequence_id"] == 1
    status, worker = await api.get("/workers/w-1")
    assert status == 200 and worker["status"] == "busy" and worker["current_rollout_id"] == body["rollout_id"]
    status, body = await api.post("/rollouts", {"mode": "val"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "input"]


async def test_query_rollouts_pagination_filters_and_sorting(api: Api) -> None:
    created = await _enqueue(api, 10)
    created += await _enqueue(api, 5, mode="train")
    ids = [r["rollout_id"] for r in created]
    await api.post("/queues/rollouts/dequeue", {"limit": 3})

    status, page = await api.get("/rollouts", params={"limit": 3, "offset": 0})
    assert status == 200 and len(page["items"]) == 3 and page["limit"] == 3 and page["total"] == 15
    status, everything = await api.get("/rollouts", params={"limit": -1})
    assert len(everything["items"]) == 15
    attempted = [item for item in everything["items"] if "attempt" in item]
    assert len(attempted) == 3

    _, search = await api.post("/rollouts/search", {"limit": -1})
    assert search == everything

    _, asc = await api.get("/rollouts", params={"sort_by": "start_time", "sort_order": "asc"})
    _, desc = await api.get("/rollouts", params={"sort_by": "start_time", "sort_order": "desc"})
    asc_times = [r["start_time"] for r in asc["items"]]
    desc_times = [r["start_time"] for r in desc["items"]]
    assert asc_times == sorted(asc_times) and desc_times == sorted(desc_times, reverse=True)
    assert asc_times[0] < asc_times[-1]

    _, preparing = await api.get("/rollouts", params={"status_in": "preparing"})
    assert preparing["total"] == 3
    _, both = await api.get("/rollouts", params=[("status_in", "preparing"), ("status_in", "queuing")])
    assert both["total"] == 15
    _, subset = await api.get("/rollouts", params=[("rollout_id_in", ids[0]), ("rollout_id_in", ids[1])])
    assert {r["rollout_id"] for r in subset["items"]} == {ids[0], ids[1]}
    _, contains = await api.get("/rollouts", params={"rollout_id_contains": ids[4][-6:]})
    assert ids[4] in {r["rollout_id"] for r in contains["items"]}

    _, anded = await api.post("/rollouts/search", {"status_in": ["preparing"], "rollout_id_in": [ids[0], ids[-1]]})
    assert {r["rollout_id"] for r in anded["items"]} == {ids[0]}
    _, ored = await api.post(
        "/rollouts/search", {"status_in": ["preparing"], "rollout_id_in": [ids[-1]], "filter_logic": "or"}
    )
    assert {r["rollout_id"] for r in ored["items"]} == {ids[0], ids[1], ids[2], ids[-1]}

    _, by_mode = await api.get("/rollouts", params={"sort_by": "mode", "sort_order": "asc"})
    assert by_mode["items"][0]["mode"] is None and by_mode["items"][-1]["mode"] == "train"
    _, by_mode_desc = await api.get("/rollouts", params={"sort_by": "mode", "sort_order": "desc"})
    assert by_mode_desc["items"][0]["mode"] == "train" and by_mode_desc["items"][-1]["mode"] is None


async def test_rollout_query_validation(api: Api) -> None:
    status, body = await api.get("/rollouts", params={"sort_by": "nonexistent_field"})
    assert status == 400
    assert body["detail"].startswith("Invalid sort_by: nonexistent_field, allowed fields are: rollout_id, input")
    status, body = await api.post("/rollouts/search", {"sort_by": "nonexistent_field"})
    assert status == 400 and "Invalid sort_by: nonexistent_field, allowed fields are: " in body["detail"]
    assert (await api.get("/rollouts", params={"limit": 0}))[1] == {
        "detail": "Limit must be greater than 0 or -1 for no limit"
    }
    assert (await api.get("/rollouts", params={"limit": -2}))[0] == 400
    assert (await api.get("/rollouts", params={"offset": -1}))[1] == {
        "detail": "Offset must be greater than or equal to 0"
    }
    status, body = await api.get("/rollouts", params={"sort_order": "sideways"})
    assert status == 422 and body["detail"][0]["loc"] == ["query", "sort_order"]
    status, body = await api.get("/rollouts", params={"status_in": "bogus"})
    assert status == 422 and body["detail"][0]["loc"][:2] == ["query", "status_in"]
    status, body = await api.post("/rollouts/search", {"filter_logic": "xor"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "filter_logic"]


async def test_get_rollout_by_id(api: Api) -> None:
    (queued,) = await _enqueue(api, 1)
    status, body = await api.get(f"/rollouts/{queued['rollout_id']}")
    assert status == 200 and body["rollout_id"] == queued["rollout_id"] and "attempt" not in body
    await api.post("/queues/rollouts/dequeue")
    _, body = await api.get(f"/rollouts/{queued['rollout_id']}")
    assert body["attempt"]["rollout_id"] == queued["rollout_id"]
    assert await api.get("/rollouts/unknown-rollout") == (200, None)


async def test_update_rollout_presence_semantics(api: Api) -> None:
    (rollout,) = await _enqueue(api, 1, mode="train", metadata={"a": 1})
    rid = rollout["rollout_id"]
    status, body = await api.post(f"/rollouts/{rid}", {"metadata": {"b": 2}})
    assert status == 200 and body["metadata"] == {"b": 2} and body["mode"] == "train"
    status, body = await api.post(f"/rollouts/{rid}", {"mode": None, "config": {"max_attempts": 3}})
    assert status == 200 and body["mode"] is None and body["config"]["max_attempts"] == 3
    assert body["metadata"] == {"b": 2}
    status, body = await api.post(f"/rollouts/{rid}", {"status": None})
    assert (status, body) == (400, {"detail": "status is invalid; it cannot be a null value."})
    status, body = await api.post(f"/rollouts/{rid}", {"config": None})
    assert status == 400 and body["detail"].startswith("config is invalid")
    status, body = await api.post(f"/rollouts/{rid}", {"status": "succeeded"})
    assert status == 200 and body["status"] == "succeeded" and body["end_time"] is not None
    status, body = await api.post(f"/rollouts/{rid}", {"status": "exploded"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "status"]
    status, body = await api.post(f"/rollouts/{rid}")
    assert status == 422
    status, body = await api.post("/rollouts/unknown-rollout", {"metadata": {}})
    assert status == 400 and body["error_type"] == "ValueError" and "unknown-rollout" in body["detail"]


async def test_search_route_is_not_an_update(api: Api) -> None:
    await _enqueue(api, 2)
    status, body = await api.post("/rollouts/search", {"limit": 1})
    assert status == 200 and body["total"] == 2 and len(body["items"]) == 1


# ---------------------------------------------------------------------------------------------------------------------
# Attempts
# ---------------------------------------------------------------------------------------------------------------------


async def test_attempt_routes(api: Api) -> None:
    (rollout,) = await _enqueue(api, 1)
    rid = rollout["rollout_id"]
    assert await api.get(f"/rollouts/{rid}/attempts/latest") == (200, None)
    status, first = await api.post(f"/rollouts/{rid}/attempts")
    assert status == 201 and first["attempt"]["sequence_id"] == 1 and first["attempt"]["worker_id"] is None
    for i in range(4):
        status, started = await api.post(f"/rollouts/{rid}/attempts", {"worker_id": f"w{i}"})
        assert status == 201 and started["attempt"]["worker_id"] == f"w{i}"

    status, page = await api.get(f"/rollouts/{rid}/attempts", params={"limit": 2})
    assert status == 200 and page["total"] == 5 and [a["sequence_id"] for a in page["items"]] == [1, 2]
    _, searched = await api.post(f"/rollouts/{rid}/attempts/search", {"limit": 2, "offset": 2})
    assert [a["sequence_id"] for a in searched["items"]] == [3, 4]
    _, by_worker = await api.get(f"/rollouts/{rid}/attempts", params={"sort_by": "worker_id"})
    assert by_worker["items"][0]["worker_id"] is None
    _, by_time = await api.post(f"/rollouts/{rid}/attempts/search", {"sort_by": "start_time", "sort_order": "desc"})
    assert by_time["items"][0]["sequence_id"] == 5
    status, body = await api.get(f"/rollouts/{rid}/attempts", params={"sort_by": "bogus"})
    assert status == 400 and body["detail"].startswith("Invalid sort_by: bogus, allowed fields are: rollout_id")

    status, latest = await api.get(f"/rollouts/{rid}/attempts/latest")
    assert status == 200 and latest["sequence_id"] == 5
    aid = latest["attempt_id"]
    status, updated = await api.post(f"/rollouts/{rid}/attempts/{aid}", {"status": "running"})
    assert status == 200 and updated["status"] == "running"
    status, updated = await api.post(f"/rollouts/{rid}/attempts/latest", {"worker_id": "", "metadata": {}})
    assert status == 200 and updated["worker_id"] == "" and updated["metadata"] == {}
    for field in ("worker_id", "status", "last_heartbeat_time", "metadata"):
        status, body = await api.post(f"/rollouts/{rid}/attempts/{aid}", {field: None})
        assert (status, body) == (400, {"detail": f"{field} is invalid; it cannot be a null value."})
    status, body = await api.post(f"/rollouts/{rid}/attempts/{aid}", {"status": "queuing"})
    assert status == 422  # not an attempt status
    status, body = await api.post(f"/rollouts/{rid}/attempts/at-missing", {"status": "running"})
    assert status == 400 and body["error_type"] == "ValueError"
    status, body = await api.post("/rollouts/ro-missing/attempts")
    assert status == 400 and body["error_type"] == "ValueError"
    assert (await api.get("/rollouts/ro-missing/attempts"))[1]["total"] == 0


# ---------------------------------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------------------------------


async def test_worker_routes(api: Api) -> None:
    status, worker = await api.post("/workers/worker-1", {"heartbeat_stats": {"cpu": 1}})
    assert status == 200 and worker["status"] == "unknown" and worker["heartbeat_stats"] == {"cpu": 1}
    first_beat = worker["last_heartbeat_time"]
    status, worker = await api.post("/workers/worker-1")
    assert status == 200 and worker["heartbeat_stats"] == {"cpu": 1} and worker["last_heartbeat_time"] >= first_beat
    status, worker = await api.post("/workers/worker-1", {})
    assert status == 200 and worker["heartbeat_stats"] == {"cpu": 1}
    status, body = await api.post("/workers/worker-1", {"heartbeat_stats": None})
    assert (status, body) == (400, {"detail": "heartbeat_stats is invalid; it cannot be a null value."})
    status, body = await api.post("/workers/worker-1", {"heartbeat_stats": [1, 2]})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "heartbeat_stats"]
    assert (await api.get("/workers/worker-1"))[1]["worker_id"] == "worker-1"
    assert await api.get("/workers/nobody") == (200, None)

    await _enqueue(api, 2)
    for wid in ("worker-b", "worker-c"):
        await api.post("/queues/rollouts/dequeue", {"limit": 1, "worker_id": wid})
    await api.post("/workers/worker-a")
    _, busy = await api.post(
        "/workers/search",
        {"status_in": ["busy"], "worker_id_contains": "worker-", "sort_by": "worker_id", "sort_order": "desc"},
    )
    assert [w["worker_id"] for w in busy["items"]] == ["worker-c", "worker-b"]
    _, page = await api.get("/workers", params={"limit": 1, "offset": 1, "sort_by": "worker_id"})
    assert (page["limit"], page["offset"], page["total"], len(page["items"])) == (1, 1, 4, 1)
    assert page["items"][0]["worker_id"] == "worker-a"
    _, repeated = await api.get("/workers", params=[("status_in", "busy"), ("status_in", "unknown")])
    assert repeated["total"] == 4
    _, ored = await api.post(
        "/workers/search", {"status_in": ["busy"], "worker_id_contains": "-1", "filter_logic": "or"}
    )
    assert {w["worker_id"] for w in ored["items"]} == {"worker-1", "worker-b", "worker-c"}
    status, body = await api.get("/workers", params={"sort_by": "nope"})
    assert status == 400 and body["detail"].startswith("Invalid sort_by: nope, allowed fields are: worker_id")


# ---------------------------------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------------------------------


def _llm(i: int) -> dict[str, Any]:
    return {"main": {"resource_type": "llm", "endpoint": f"http://llm/{i}", "model": f"m{i}"}}


async def test_resource_routes(api: Api) -> None:
    assert await api.get("/resources/latest") == (200, None)
    status, added = await api.post("/resources", _llm(0))
    assert status == 201 and added["version"] == 1 and added["resources"]["main"]["model"] == "m0"
    assert (await api.get("/resources/latest"))[1]["resources_id"] == added["resources_id"]
    assert (await api.get(f"/resources/{added['resources_id']}"))[1] == added
    assert await api.get("/resources/missing") == (200, None)
    for i in range(1, 5):
        await api.post("/resources", _llm(i))
    await api.post("/resources/test-001", _llm(10))
    await api.post("/resources/test-003", _llm(11))
    status, updated = await api.post(
        "/resources/test-003", {"tpl": {"resource_type": "prompt_template", "template": "hi {x}", "engine": "f-string"}}
    )
    assert status == 200 and updated["version"] == 2 and updated["resources"]["tpl"]["engine"] == "f-string"
    assert (await api.get("/resources/latest"))[1]["resources_id"] == "test-003"

    status, page = await api.get("/resources", params={"limit": 3, "sort_by": "resources_id"})
    assert status == 200 and page["total"] == 7 and len(page["items"]) == 3
    _, test_ids = await api.get("/resources", params={"resources_id_contains": "test-"})
    assert test_ids["total"] == 2
    _, one = await api.get("/resources", params={"resources_id_contains": "-003"})
    assert one["total"] == 1
    _, exact = await api.get("/resources", params={"resources_id": "test-001"})
    assert [r["resources_id"] for r in exact["items"]] == ["test-001"]
    _, p1 = await api.get(
        "/resources", params={"resources_id_contains": "test-", "sort_by": "resources_id", "limit": 1}
    )
    _, p2 = await api.get(
        "/resources", params={"resources_id_contains": "test-", "sort_by": "resources_id", "limit": 1, "offset": 1}
    )
    assert [p1["items"][0]["resources_id"], p2["items"][0]["resources_id"]] == ["test-001", "test-003"]

    status, body = await api.post("/resources", {"main": {"resource_type": "gpu", "endpoint": "x"}})
    assert status == 422
    status, body = await api.post("/resources", {"main": {"resource_type": "llm", "endpoint": "x"}})
    assert status == 422 and "model" in str(body["detail"])
    status, body = await api.get("/resources", params={"sort_by": "nope"})
    assert status == 400 and body["detail"].startswith("Invalid sort_by: nope, allowed fields are: resources_id")


# ---------------------------------------------------------------------------------------------------------------------
# Spans
# ---------------------------------------------------------------------------------------------------------------------


def _span(rid: str, aid: str, seq: int, **fields: Any) -> dict[str, Any]:
    span_id = fields.pop("span_id", f"{seq:016x}")
    trace_id = fields.pop("trace_id", "a" * 32)
    body = {
        "rollout_id": rid,
        "attempt_id": aid,
        "sequence_id": seq,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": fields.pop("parent_id", None),
        "name": fields.pop("name", f"span-{seq}"),
        "status": {"status_code": "OK", "description": None},
        "attributes": fields.pop("attributes", {"k": seq}),
        "events": [],
        "links": [],
        "start_time": fields.pop("start_time", 1000.0 + seq),
        "end_time": 2000.0 + seq,
        "context": {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}},
        "parent": None,
        "resource": {"attributes": {}, "schema_url": ""},
    }
    body.update(fields)
    return body


async def test_span_routes(api: Api) -> None:
    _, started = await api.post("/rollouts", {"input": "x"})
    rid, aid = started["rollout_id"], started["attempt"]["attempt_id"]
    status, seq = await api.post("/spans/next", {"rollout_id": rid, "attempt_id": aid})
    assert (status, seq) == (200, {"sequence_id": 1})
    assert (await api.post("/spans/next", {"rollout_id": rid, "attempt_id": aid}))[1] == {"sequence_id": 2}

    for i in range(10):
        name = "special" if i in (3, 7) else f"span-{i}"
        parent = None if i % 2 == 0 else f"{i - 1:016x}"
        trace = "b" * 32 if i == 5 else "a" * 32
        status, stored = await api.post(
            "/spans",
            _span(rid, aid, 10 + i, name=name, parent_id=parent, trace_id=trace, start_time=1000.0 + (10 - i)),
        )
        assert status == 201 and stored["sequence_id"] == 10 + i
    status, extra = await api.post("/spans", _span(rid, aid, 50, custom_field={"x": 1}))
    assert status == 201 and extra["custom_field"] == {"x": 1}

    status, page = await api.get("/spans", params={"rollout_id": rid, "limit": 4})
    assert status == 200 and page["total"] == 11 and [s["sequence_id"] for s in page["items"]] == [10, 11, 12, 13]
    _, same = await api.post("/spans/search", {"rollout_id": rid, "attempt_id": aid, "limit": 4})
    assert same["items"] == page["items"]
    _, latest = await api.get("/spans", params={"rollout_id": rid, "attempt_id": "latest"})
    assert latest["total"] == 11
    _, by_time = await api.get("/spans", params={"rollout_id": rid, "sort_by": "start_time", "limit": 1})
    assert by_time["items"][0]["sequence_id"] == 19
    _, trace = await api.get("/spans", params={"rollout_id": rid, "trace_id": "b" * 32})
    assert [s["sequence_id"] for s in trace["items"]] == [15]
    _, named = await api.get("/spans", params={"rollout_id": rid, "name_contains": "special"})
    assert named["total"] == 2
    _, anded = await api.post("/spans/search", {"rollout_id": rid, "name": "special", "span_id": f"{13:016x}"})
    assert anded["total"] == 1
    _, ored = await api.post(
        "/spans/search", {"rollout_id": rid, "name": "special", "span_id": f"{10:016x}", "filter_logic": "or"}
    )
    assert ored["total"] == 3
    _, parents = await api.get("/spans", params={"rollout_id": rid, "sort_by": "parent_id", "sort_order": "asc"})
    assert parents["items"][0]["parent_id"] is None
    _, parents_desc = await api.get("/spans", params={"rollout_id": rid, "sort_by": "parent_id", "sort_order": "desc"})
    assert parents_desc["items"][-1]["parent_id"] is None

    status, body = await api.get("/spans", params={"rollout_id": rid, "sort_by": "bogus"})
    assert status == 400 and body["detail"].startswith("Invalid sort_by: bogus, allowed fields are: rollout_id")
    status, body = await api.get("/spans")
    assert status == 422 and body["detail"][0]["loc"] == ["query", "rollout_id"]
    status, body = await api.post("/spans", {"rollout_id": rid})
    assert status == 422
    status, body = await api.post("/spans", _span("ro-missing", "at-missing", 1))
    assert status == 400 and body["error_type"] == "ValueError"


# ---------------------------------------------------------------------------------------------------------------------
# Waits
# ---------------------------------------------------------------------------------------------------------------------


async def test_wait_for_rollouts(api: Api) -> None:
    _, a = await api.post("/rollouts", {"input": "a"})
    _, b = await api.post("/rollouts", {"input": "b"})
    await api.post(f"/rollouts/{a['rollout_id']}/attempts/latest", {"status": "succeeded"})
    status, done = await api.post(
        "/waits/rollouts", {"rollout_ids": [a["rollout_id"], b["rollout_id"], "ro-missing"], "timeout": 0.05}
    )
    assert status == 200 and [r["rollout_id"] for r in done] == [a["rollout_id"]]
    assert done[0]["status"] == "succeeded" and "attempt" not in done[0]
    assert (await api.post("/waits/rollouts", {"timeout": 0}))[0] == 422
    assert (await api.post("/waits/rollouts", {"rollout_ids": [], "timeout": -1}))[0] == 400


# ---------------------------------------------------------------------------------------------------------------------
# OTLP routes (detailed decoding tests live in tests/store/test_server_otlp.py)
# ---------------------------------------------------------------------------------------------------------------------


async def test_otlp_routes(api: Api, server: LightningStoreServer) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _, started = await api.post("/rollouts", {"input": "x"})
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    for key, value in (
        ("agentlightning.rollout_id", started["rollout_id"]),
        ("agentlightning.attempt_id", started["attempt"]["attempt_id"]),
    ):
        attr = rs.resource.attributes.add()
        attr.key = key
        attr.value.string_value = value
    span = rs.scope_spans.add().spans.add()
    span.name = "otlp-span"
    span.trace_id = bytes(range(16))
    span.span_id = bytes(range(8))
    span.start_time_unix_nano = 1_700_000_000_000_000_000
    status, body = await api.call(
        "POST",
        "/v1/traces",
        data=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        prefix="",
    )
    assert (status, body) == (200, b"")
    spans = await server.query_spans(started["rollout_id"])
    assert [s.name for s in spans] == ["otlp-span"] and spans.items[0].sequence_id == 1
    for signal in ("metrics", "logs", "development/profiles"):
        status, body = await api.call("POST", f"/v1/{signal}", data=b"x", prefix="")
        assert (status, body) == (501, b"")


# ---------------------------------------------------------------------------------------------------------------------
# CORS, metrics, Prometheus
# ---------------------------------------------------------------------------------------------------------------------


async def test_cors() -> None:
    server = await _start(cors_allow_origins=[" http://allowed.test ", ""])
    try:
        async with aiohttp.ClientSession() as session:
            url = server.endpoint + "/v1/agl/health"
            async with session.get(url, headers={"Origin": "http://allowed.test"}) as r:
                assert r.headers["access-control-allow-origin"] == "http://allowed.test"
                assert r.headers["access-control-allow-credentials"] == "true"
            async with session.options(
                url, headers={"Origin": "http://allowed.test", "Access-Control-Request-Method": "GET"}
            ) as r:
                assert r.status == 200 and "GET" in r.headers["access-control-allow-methods"]
            async with session.get(url, headers={"Origin": "http://other.test"}) as r:
                assert "access-control-allow-origin" not in r.headers
    finally:
        await server.stop()
    server = await _start(cors_allow_origins=["http://a.test", "*"])
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.endpoint + "/v1/agl/health", headers={"Origin": "http://x.test"}) as r:
                assert r.headers["access-control-allow-origin"] in ("*", "http://x.test")
    finally:
        await server.stop()


def test_template_http_path() -> None:
    assert template_http_path("/v1/agl/health") == "/v1/agl/health"
    assert template_http_path("/v1/agl/rollouts/ro-1") == "/v1/agl/rollouts/{rollout_id}"
    assert template_http_path("/v1/agl/rollouts/ro-1/attempts") == "/v1/agl/rollouts/{rollout_id}/attempts"
    assert template_http_path("/v1/agl/rollouts/ro-1/attempts/at-1") == (
        "/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}"
    )
    assert template_http_path("/v1/agl/rollouts/ro-1/attempts/latest") == (
        "/v1/agl/rollouts/{rollout_id}/attempts/latest"
    )
    assert template_http_path("/v1/agl/rollouts/ro-1/attempts/search") == (
        "/v1/agl/rollouts/{rollout_id}/attempts/search"
    )
    assert template_http_path("/v1/agl/rollouts/search") == "/v1/agl/rollouts/search"
    assert template_http_path("/v1/agl/queues/rollouts/dequeue") == "/v1/agl/queues/rollouts/dequeue"
    assert template_http_path("/v1/agl/resources/latest") == "/v1/agl/resources/latest"
    assert template_http_path("/v1/agl/resources/rs-1") == "/v1/agl/resources/{resources_id}"
    assert template_http_path("/v1/agl/workers/w-1") == "/v1/agl/workers/{worker_id}"
    assert template_http_path("/v1/traces") == "/v1/traces"


async def test_console_metrics_recorded() -> None:
    tracker = ConsoleMetricsBackend()
    store = InMemoryLightningStore(thread_safe=True, tracker=tracker)
    server = await _start(store, tracker=tracker)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.endpoint)
            await api.post("/rollouts", {"input": 1})
            await api.post("/rollouts/missing", {"metadata": {}})
    finally:
        await server.stop()
    counters = {key for key, _ in tracker._counter_state}
    histograms = {key for key, _ in tracker._hist_state}
    assert {"agl.http.total", "agl.store.total"} <= counters
    assert "agl.http.latency" in histograms
    labels = {dict(label_key).get("path") for name, label_key in tracker._counter_state if name == "agl.http.total"}
    assert "/v1/agl/rollouts" in labels or None in labels


async def test_prometheus_exposition() -> None:
    pytest.importorskip("prometheus_client")
    from rollouthub.utils.metrics import PrometheusMetricsBackend

    tracker = PrometheusMetricsBackend()
    server = await _start(tracker=tracker)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.endpoint)
            await api.get("/health")
            await api.post("/workers/w-prom")
            status, text = await api.call("GET", "/v1/prometheus/", prefix="")
            assert status == 200
            text = text.decode()
            assert "agl_http_total" in text and "agl_http_latency_bucket" in text
            assert 'path="/v1/agl/workers/{worker_id}"' in text
    finally:
        await server.stop()


# ---------------------------------------------------------------------------------------------------------------------
# Delegation and processes
# ---------------------------------------------------------------------------------------------------------------------


async def test_delegation_in_owner_process(server: LightningStoreServer) -> None:
    rollout = await server.enqueue_rollout(input={"direct": True})
    assert (await server.get_rollout_by_id(rollout.rollout_id)) == rollout
    assert await server.update_worker("w", heartbeat_stats=UNSET)


async def test_non_thread_safe_store_is_serialized() -> None:
    store = InMemoryLightningStore(thread_safe=False, scan_debounce_seconds=0.0)
    server = await _start(store)
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server.endpoint)
            results = await asyncio.gather(*[api.post("/rollouts", {"input": i}) for i in range(20)])
        assert all(status == 201 for status, _ in results)
        assert len({body["rollout_id"] for _, body in results}) == 20
    finally:
        await server.stop()


def _child_enqueue(server: LightningStoreServer, queue: Any) -> None:
    async def run() -> str:
        rollout = await server.enqueue_rollout(input={"from": "child"})
        return rollout.rollout_id

    queue.put(asyncio.run(run()))


async def test_forked_child_uses_http() -> None:
    server = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port(), launch_mode="thread"
    )
    await server.start()
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        process = ctx.Process(target=_child_enqueue, args=(server, queue))
        process.start()
        rollout_id = await asyncio.to_thread(queue.get, True, 30)
        await asyncio.to_thread(process.join, 10)
        assert process.exitcode == 0
        assert (await server.get_rollout_by_id(rollout_id)).input == {"from": "child"}  # type: ignore[union-attr]
    finally:
        await server.stop()


async def test_dashboard_mount(tmp_path: Any) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<html>dashboard</html>")
    (tmp_path / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "favicon.svg").write_text("<svg/>")
    server = await _start(dashboard_dir=str(tmp_path), api_token="tok")
    try:
        assert server.dashboard_enabled
        async with aiohttp.ClientSession() as session:
            async with session.get(server.endpoint + "/") as r:
                assert r.status == 200 and "dashboard" in await r.text()
            async with session.get(server.endpoint + "/assets/app.js") as r:
                assert r.status == 200 and r.headers["cache-control"] == "public, max-age=31536000, immutable"
            async with session.get(server.endpoint + "/rollouts/some/deep/link") as r:
                assert r.status == 200 and "dashboard" in await r.text()  # SPA fallback
            async with session.get(server.endpoint + "/favicon.svg") as r:
                assert r.status == 200 and await r.text() == "<svg/>"
            async with session.get(server.endpoint + "/../../etc/passwd") as r:
                assert "root:" not in await r.text()
            headers = {"Authorization": "Bearer tok"}
            async with session.get(server.endpoint + "/v1/unknown", headers=headers) as r:
                assert r.status == 404 and await r.json() == {"detail": "Not Found"}
            async with session.get(server.endpoint + "/v1/agl/statistics") as r:
                assert r.status == 401  # the API stays protected, static files do not need the token
    finally:
        await server.stop()


async def test_missing_dashboard_is_skipped(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    server = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True), host="127.0.0.1", port=pick_free_port(), dashboard_dir=str(tmp_path)
    )
    assert not server.dashboard_enabled
    assert "Dashboard build not found" in caplog.text


async def test_add_otel_span_uses_module_level_span(
    server: LightningStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    import rollouthub.store.client_server as client_server

    started = await server.start_rollout(input="otel")
    with TracerProvider().get_tracer("t").start_as_current_span("otel-span") as otel_span:
        otel_span.set_attribute("k", 1)
    calls: list[int] = []
    original = client_server.Span.from_opentelemetry

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["sequence_id"])
        return original(*args, **kwargs)

    monkeypatch.setattr(client_server.Span, "from_opentelemetry", spy)
    stored = await server.add_otel_span(started.rollout_id, started.attempt.attempt_id, otel_span)
    assert stored is not None and stored.name == "otel-span" and stored.sequence_id == 1
    await server.add_otel_span(started.rollout_id, started.attempt.attempt_id, otel_span, sequence_id=7)
    assert calls == [1, 7]


async def test_lock_is_not_leaked_when_a_waiting_call_is_cancelled() -> None:
    store = InMemoryLightningStore(thread_safe=False)
    server = LightningStoreServer(store, host="127.0.0.1", port=pick_free_port(), launch_mode="asyncio")
    async with held_by_another_thread(server._store_lock):  # another thread is using the store
        task = asyncio.create_task(server.statistics())
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting for the lock
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not server._store_lock.locked()
    assert (await server.statistics())["name"] == "InMemoryLightningStore"
