"""The store server's route matcher: its indexed lookup finds exactly what the ordered scan of the routes finds."""

from __future__ import annotations

import itertools
import random
from typing import List, Optional, Tuple

import pytest

from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server import LightningStoreServer
from rollouthub.store.server.routing import Route, Router

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]


def scan(routes: List[Route], method: str, path: str) -> Tuple[Optional[Route], Tuple[str, ...], Optional[Route]]:
    """Starlette's rule, literally: the first route whose path and method match; else the first whose path matches."""
    parts = path[1:].split("/") if path != "/" else []
    partial: Optional[Route] = None
    for route in routes:
        if route.param_names or route.prefix:
            params = route.match_path(parts)
        else:
            params = () if route.path == path else None
        if params is None:
            continue
        if route.allows(method):
            return route, params, None
        partial = partial or route
    return None, (), partial


def sample_paths(routes: List[Route], rng: random.Random) -> List[str]:
    """Paths built from every template (ids, empty ids, trailing slashes, extra or missing segments) plus oddities."""
    paths = {"/", "//", "/v1", "/v1/", "/v1/agl", "/v1/agl/", "/v1/agl//", "/nope", "/assets", "/assets/", "/a/b/c/d"}
    paths.update({"/v1/agl/rollouts" + "/x" * 40, "/assets" + "/y" * 40, "/" * 50})  # longer than the index goes
    for route in routes:
        for value in ("x", "", "search", "latest", "rollouts", f"id-{rng.randrange(10**6)}"):
            path = route.path
            for name in route.param_names:
                path = path.replace("{" + name + ":path}", f"{value}/deeper").replace("{" + name + "}", value)
            for variant in (path, path + "/", path + "/extra", path.rsplit("/", 1)[0], path.replace("/v1/", "/v2/")):
                paths.add(variant or "/")
    return sorted(paths)


@pytest.mark.parametrize("dashboard", [True, False])
def test_indexed_match_equals_the_ordered_scan(tmp_path, dashboard: bool) -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(
        store, "127.0.0.1", 1, launch_mode="asyncio", dashboard_dir=None if dashboard else str(tmp_path)
    )
    routes = server.app.routes
    assert any(route.param_names for route in routes)
    router = Router(routes)
    rng = random.Random(15)
    paths = sample_paths(routes, rng)
    for _ in range(2):  # the second round is served from the cached candidate lists
        for method, path in itertools.product(METHODS, paths):
            assert router.match(method, path) == scan(routes, method, path), (method, path)


def test_earlier_parameter_route_wins_over_a_later_literal() -> None:
    async def first(call):  # pragma: no cover - never called
        return b""

    async def second(call):  # pragma: no cover - never called
        return b""

    async def third(call):  # pragma: no cover - never called
        return b""

    routes = [
        Route(["GET"], "/items/{item_id}", first),
        Route(["GET"], "/items/special", second),
        Route(["POST"], "/items/special", third),
        Route(None, "/static", third, prefix=True),
    ]
    router = Router(routes)
    assert router.match("GET", "/items/special") == (routes[0], ("special",), None)
    assert router.match("POST", "/items/special") == (routes[2], (), None)
    assert router.match("PUT", "/items/special") == (None, (), routes[0])
    assert router.match("DELETE", "/static/a/b") == (routes[3], (), None)
    assert router.match("GET", "/static") == (None, (), None)
    assert router.match("GET", "/items/") == (None, (), None)
