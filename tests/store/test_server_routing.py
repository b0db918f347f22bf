"""The route table on Starlette's router, the middleware order, and the OpenAPI document generated from the table.

Each HTTP test starts a real server (in-memory store, asyncio launch mode) on a free loopback port and talks to it with
``aiohttp``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List

import aiohttp
import pytest
from multidict import CIMultiDict
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount, Router
from starlette.routing import Route as StarletteRoute

from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server import LightningStoreServer
from rollouthub.store.server.openapi import build_openapi
from rollouthub.store.server.routing import Query, Route, RouteIndex
from rollouthub.utils.server_launcher import pick_free_port

pytestmark = pytest.mark.timeout(60)

SNAPSHOT = Path(__file__).parent / "data" / "store_openapi.json"
"""The document the server published before it served requests on Starlette (FastAPI's generator, 2026-12-06)."""


async def _start(tmp_path: Path, **kwargs: Any) -> LightningStoreServer:
    server = LightningStoreServer(
        InMemoryLightningStore(thread_safe=True),
        host="127.0.0.1",
        port=pick_free_port(),
        launch_mode="asyncio",
        dashboard_dir=str(tmp_path),  # no bundle there: no dashboard fallback route
        **kwargs,
    )
    await server.start()
    return server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LightningStoreServer]:
    srv = await _start(tmp_path)
    try:
        yield srv
    finally:
        await srv.stop()


async def _request(method: str, url: str, **kwargs: Any) -> tuple[int, CIMultiDict[str], bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, allow_redirects=False, **kwargs) as response:
            return response.status, CIMultiDict(response.headers), await response.read()


def test_every_declaration_is_mounted_in_order(tmp_path: Path) -> None:
    server = LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", 1, launch_mode="asyncio")
    declared = server.app.routes
    mounted = server.app.router.routes
    assert [route.name for route in mounted] == [route.name for route in declared]
    for declaration, route in zip(declared, mounted, strict=True):
        if declaration.prefix:
            assert isinstance(route, Mount) and route.path == declaration.path
        else:
            assert isinstance(route, StarletteRoute) and route.path == declaration.path
            assert set(declaration.methods or ()) <= set(route.methods or ())


async def test_first_full_match_wins_then_405_then_307(server: LightningStoreServer) -> None:
    base = server.endpoint + "/v1/agl"
    # POST /rollouts/search is declared before GET /rollouts/{rollout_id}: a GET falls through to the parameter route.
    status, _, body = await _request("GET", base + "/rollouts/search")
    assert (status, body) == (200, b"null")
    status, headers, body = await _request("PUT", base + "/rollouts/x")
    assert status == 405 and json.loads(body) == {"detail": "Method Not Allowed"}
    # Starlette's rule: the methods of the first route whose path matches (GET /rollouts/{rollout_id}).
    assert {m.strip() for m in headers["Allow"].split(",")} == {"GET", "HEAD"}
    status, headers, body = await _request("GET", base + "/rollouts/")
    assert status == 307 and headers["Location"] == base + "/rollouts" and body == b""
    status, _, body = await _request("GET", base + "/nothing/here")
    assert status == 404 and json.loads(body) == {"detail": "Not Found"}


async def test_auth_answers_before_the_router_and_the_body_limit(tmp_path: Path) -> None:
    server = await _start(tmp_path, api_token="secret", max_body_bytes=64)
    try:
        base = server.endpoint
        # Unknown path, oversized body: the token is checked first.
        status, headers, body = await _request("POST", base + "/nothing", data=b"x" * 100)
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert json.loads(body) == {"detail": "Missing bearer token"}
        auth = {"Authorization": "Bearer secret"}
        status, _, body = await _request("POST", base + "/nothing", data=b"x" * 100, headers=auth)
        assert status == 413 and json.loads(body) == {"detail": "Request body too large (limit 64 bytes)"}
        status, _, body = await _request("POST", base + "/nothing", data=b"x", headers=auth)
        assert status == 404
        assert (await _request("GET", base + "/v1/agl/health"))[0] == 200  # public
    finally:
        await server.stop()


async def test_store_errors_are_mapped_on_api_routes_only(server: LightningStoreServer) -> None:
    base = server.endpoint + "/v1/agl"
    status, _, body = await _request("GET", base + "/rollouts", params={"limit": "0"})
    assert status == 400 and json.loads(body) == {"detail": "Limit must be greater than 0 or -1 for no limit"}
    status, _, body = await _request("GET", base + "/rollouts", params={"limit": "x"})
    assert status == 422 and json.loads(body)["detail"][0]["loc"] == ["query", "limit"]


def test_openapi_document_equals_the_published_one() -> None:
    server = LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", 1, launch_mode="asyncio")
    assert server.app.openapi() == json.loads(SNAPSHOT.read_text())


def test_openapi_describes_a_declaration() -> None:
    async def list_items(call: Any) -> bytes:
        """List the items of a shelf."""
        return b"[]"

    route = Route(
        ["GET"],
        "/shelves/{shelf_id}/items",
        list_items,
        query={"limit": Query(int, 10, description="at most this many")},
        response_model=Dict[str, int],
    )
    document = build_openapi([route])
    operation = document["paths"]["/shelves/{shelf_id}/items"]["get"]
    assert operation["operationId"] == "list_items_shelves__shelf_id__items_get"
    assert operation["summary"] == "List Items" and operation["description"] == "List the items of a shelf."
    assert operation["parameters"] == [
        {"name": "shelf_id", "in": "path", "required": True, "schema": {"title": "Shelf Id", "type": "string"}},
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "description": "at most this many",
            "schema": {"type": "integer", "default": 10, "description": "at most this many", "title": "Limit"},
        },
    ]
    response = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert response["additionalProperties"] == {"type": "integer"}
    assert set(operation["responses"]) == {"200", "422"}
    assert set(document["components"]["schemas"]) == {"HTTPValidationError", "ValidationError"}


# ---------------------------------------------------------------------------------------------------------------------
# RouteIndex: Starlette's router asked about the routes that can match only
# ---------------------------------------------------------------------------------------------------------------------

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]


def _sample_paths(templates: List[str]) -> List[str]:
    """Paths built from every template (ids, empty ids, trailing slashes, extra or missing segments) plus oddities."""
    paths = {"/", "//", "/v1", "/v1/", "/v1/agl", "/v1/agl/", "/v1/agl//", "/nope", "/assets", "/assets/", "/a/b/c/d"}
    paths.update({"/v1/agl/rollouts" + "/x" * 20, "/assets" + "/y" * 20, "/" * 30, "/v1/aglx", "/v1/agl/workersx/1"})
    for template in templates:
        for value in ("x", "", "search", "latest", "rollouts", "id-7"):
            path = re.sub(r"{[^}:]+:path}", f"{value}/deeper", template)
            path = re.sub(r"{[^}]+}", value, path)
            for variant in (path, path + "/", path + "/extra", path.rsplit("/", 1)[0], path.replace("/v1/", "/v2/")):
                paths.add(variant or "/")
    return sorted(paths)


def _probe(method: str, path: str) -> Dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "query_string": b"", "headers": []}


@pytest.mark.parametrize("dashboard", [True, False])
def test_route_index_groups_hold_every_route_that_can_match(tmp_path: Path, dashboard: bool) -> None:
    server = LightningStoreServer(
        InMemoryLightningStore(),
        "127.0.0.1",
        1,
        launch_mode="asyncio",
        dashboard_dir=None if dashboard else str(tmp_path),
    )
    router = server.app.router
    index = RouteIndex(router)
    templates = [route.path for route in server.app.routes]
    for path in _sample_paths(templates):
        candidates = index.candidates(index.key(path))
        matching = [route for route in router.routes if route.matches(_probe("GET", path))[0] is not Match.NONE]
        assert [route for route in candidates if route in matching] == matching, path


async def test_route_index_answers_as_the_full_router() -> None:
    """The same endpoint, path parameters, 405, 307 or 404 for every method and path, on a table with shadowing."""

    class endpoint:  # an ASGI app (Starlette calls a plain function as a request -> response endpoint)
        def __init__(self, name: str) -> None:
            self.name = name

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "served", "by": self.name, "params": dict(scope.get("path_params", {}))})

    routes = [
        StarletteRoute("/items/{item_id}", endpoint("item"), methods=["GET"]),
        StarletteRoute("/items/special", endpoint("special"), methods=["GET", "POST"]),
        StarletteRoute("/items", endpoint("items"), methods=["POST"]),
        StarletteRoute("/a/b/c/{rest:path}", endpoint("deep"), methods=["PUT"]),
        StarletteRoute("/a/b/c/d", endpoint("d"), methods=["GET"]),
        Mount("/static", app=endpoint("static")),
        StarletteRoute("/{anything:path}", endpoint("fallback"), methods=["GET"]),
    ]
    router = Router(routes)
    index = RouteIndex(router, depth=2)
    templates = ["/items/{item_id}", "/items/special", "/items", "/a/b/c/{rest:path}", "/a/b/c/d", "/static/{f:path}"]

    async def outcome(app: Any, method: str, path: str) -> Any:
        sent: List[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        try:
            await app({**_probe(method, path), "app": object()}, None, send)
        except HTTPException as exc:
            return ("http", exc.status_code, exc.headers and sorted(exc.headers["Allow"].split(", ")))
        return [{k: v for k, v in m.items() if k != "body"} for m in sent]

    served = set()
    for method in METHODS:
        for path in _sample_paths(templates):
            expected = await outcome(router, method, path)
            assert await outcome(index, method, path) == expected, (method, path)
            if isinstance(expected, list) and expected and expected[0]["type"] == "served":
                served.add(expected[0]["by"])
    assert served == {"item", "special", "items", "deep", "d", "static", "fallback"}
