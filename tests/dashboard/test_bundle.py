"""The committed dashboard bundle ships in the package and is served by the store (no browser needed).

The browser tests live in ``dashboard/e2e`` (run by ``dashboard/ci.sh``); this test keeps the main pytest run honest
about the Python side: the bundle exists where ``LightningStoreServer`` looks for it and the SPA routes work.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import rollouthub
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server.dashboard import DASHBOARD_ROUTES

BUNDLE = Path(rollouthub.__file__).resolve().parent / "dashboard"
APP_SOURCE = Path(__file__).resolve().parents[2] / "dashboard" / "src" / "App.tsx"


async def _get(app: Any, path: str, headers: Dict[str, str] | None = None) -> Tuple[int, Dict[str, str], bytes]:
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 12345),
        "server": ("127.0.0.1", 80),
    }
    messages: List[Dict[str, Any]] = []
    sent = False

    async def receive() -> Dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects; the response cancels this when done
        return {"type": "http.disconnect"}

    async def send(message: Dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}, body


def test_bundle_is_in_the_package() -> None:
    index = BUNDLE / "index.html"
    assert index.is_file(), "build the dashboard: cd dashboard && npm ci && npm run build"
    html = index.read_text()
    assert "<title>rollouthub</title>" in html  # issue 18: the product name
    assets = re.findall(r'(?:src|href)="/assets/([^"]+)"', html)
    assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets)
    for asset in assets:
        assert (BUNDLE / "assets" / asset).is_file(), asset
    # Issue 29: the page links its icon, which the bundle holds at its root.
    assert '<link rel="icon" href="/favicon.ico"' in html
    assert (BUNDLE / "favicon.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert (BUNDLE / "favicon.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("token", [None, "s3cret"])
async def test_store_serves_the_dashboard(token: str | None) -> None:
    server = LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", 4747, api_token=token)
    app = server.app
    index = (BUNDLE / "index.html").read_bytes()
    for path in ("/", "/rollouts", "/traces?rolloutId=ro-x&attemptId=at-y", "/runners"):
        status, _, body = await _get(app, path)
        assert status == 200 and body == index, path
    asset = next(p.name for p in (BUNDLE / "assets").iterdir() if p.suffix == ".js")
    status, headers, _ = await _get(app, f"/assets/{asset}")
    assert status == 200
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    status, _, _ = await _get(app, "/v1/unknown", auth)
    assert status == 404
    status, _, _ = await _get(app, "/v1/agl/health")
    assert status == 200
    status, _, _ = await _get(app, "/v1/agl/rollouts")
    assert status == (401 if token else 200)
    if token:
        status, _, _ = await _get(app, "/v1/agl/rollouts", auth)
        assert status == 200


@pytest.mark.parametrize("token", [None, "s3cret"])
async def test_store_serves_the_favicon(token: str | None) -> None:
    """Issue 29: ``/favicon.ico`` (what browsers ask for) answers the bundle's icon, without a token, cached for a day;
    ``index.html`` is never cached (it names the current build's assets)."""
    server = LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", 4747, api_token=token)
    status, headers, body = await _get(server.app, "/favicon.ico")
    assert status == 200
    assert headers["content-type"].startswith("image/")
    assert headers["cache-control"] == "public, max-age=86400"
    assert body == (BUNDLE / "favicon.ico").read_bytes()
    status, headers, body = await _get(server.app, "/favicon.svg")
    assert status == 200 and headers["content-type"].startswith("image/svg")
    for path in ("/index.html", "/"):
        status, headers, _ = await _get(server.app, path)
        assert status == 200 and "cache-control" not in headers, path


def test_spa_routes_are_the_dashboard_pages() -> None:
    """The server's SPA fallback serves exactly the client-side routes of the dashboard's router."""
    pages = set(re.findall(r"case '/([a-z-]+)':", APP_SOURCE.read_text()))
    assert pages == set(DASHBOARD_ROUTES)


@pytest.mark.parametrize("token", [None, "s3cret"])
async def test_unknown_paths_are_404_json_not_the_dashboard(token: str | None) -> None:
    """Issue 18 (point 6): probes and scrapers of /health, /metrics, ... get a 404, not the dashboard's HTML."""
    server = LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", 4747, api_token=token)
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    for path in ("/health", "/metrics", "/favicon.png", "/api/v1/things", "/v1", "/v1/unknown", "/rolloutsx"):
        status, headers, body = await _get(server.app, path, auth)
        assert status == 404, path
        assert headers["content-type"] == "application/json" and body == b'{"detail":"Not Found"}', path
    index = (BUNDLE / "index.html").read_bytes()
    for path in ("/", "/index.html", "/settings/", "/resources", "/rollouts/ro-1/deep", "/traces?rolloutId=x"):
        status, _, body = await _get(server.app, path)
        assert status == 200 and body == index, path
