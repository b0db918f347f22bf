"""The adversarial table (``cases.py``) against a real server of every backend, over real HTTP.

For each backend one server is started (SQL stores with a pool of ONE connection) and every case of the table is
sent in turn. After each case the suite requires that the server is healthy (``GET /v1/agl/health``) and that two
legitimate calls still succeed -- a dequeue (a write unit) and a span search of the seeded rollout (a read) -- so a
request that poisons the pooled connection, leaks a lock or wedges the event loop fails the case that did it. All
failures of a backend are reported together.
"""

from __future__ import annotations

import asyncio
from typing import Any, List, Optional, Tuple

import aiohttp
import pytest

from .cases import BODY_LIMIT, Case, build_cases, describe
from .live import BACKENDS, Live, live_server

pytestmark = pytest.mark.timeout(240)

MIN_CASES = 200


async def send_raw(port: int, case: Case, path: str) -> Tuple[int, bytes]:
    """Send ``case`` byte for byte over a fresh socket (``Connection: close``); the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = f"{case.method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode("latin-1")
        for key, value in case.headers:
            head += f"{key}: {value}\r\n".encode("latin-1")
        body = case.body or b""
        if body and not any(key.lower() == "content-length" for key, _ in case.headers):
            head += b"Content-Length: %d\r\n" % len(body)
        writer.write(head + b"\r\n" + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=20)
    finally:
        writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    parts = status_line.split(b" ")
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
    return status, rest.partition(b"\r\n\r\n")[2]


async def send(session: aiohttp.ClientSession, live: Live, case: Case) -> Tuple[int, bytes, Optional[Any]]:
    """Send one case; the status, the (decompressed) body and the decoded JSON body when there is one."""
    path = case.path.format(**live.ids) if "{" in case.path else case.path
    if case.raw:
        status, body = await send_raw(live.port, case, path)
    else:
        url = live.endpoint + path + (f"?{case.query}" if case.query else "")
        async with session.request(
            case.method, aiohttp.client.URL(url, encoded=True), data=case.body, headers=dict(case.headers)
        ) as response:
            status, body = response.status, await response.read()
    payload: Optional[Any] = None
    try:
        import json

        payload = json.loads(body)
    except ValueError:
        pass
    return status, body, payload


async def still_healthy(session: aiohttp.ClientSession, live: Live) -> Optional[str]:
    """``None`` when health and two legitimate calls succeed, else what failed."""
    base = live.endpoint + "/v1/agl"
    try:
        async with session.get(base + "/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return f"health answered {r.status}"
        async with session.post(base + "/queues/rollouts/dequeue", json={"worker_id": "legit-worker"}) as r:
            if r.status != 200:
                return f"legitimate dequeue answered {r.status}: {(await r.text())[:300]}"
        async with session.post(base + "/spans/search", json={"rollout_id": live.ids["rollout_id"]}) as r:
            if r.status != 200 or (await r.json())["total"] < 1:
                return f"legitimate span search answered {r.status}: {(await r.text())[:300]}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return f"server unreachable after the case: {exc!r}"
    return None


def judge(case: Case, status: int, body: bytes, payload: Optional[Any]) -> Optional[str]:
    """``None`` when the answer is the expected one, else what is wrong with it."""
    text = body.decode("utf-8", errors="replace")
    if status not in case.statuses():
        return f"status {status} (expected {case.statuses()}): {text[:400]}"
    if case.names is not None and case.names.lower() not in text.lower():
        return f"the answer does not name {case.names!r}: {text[:400]}"
    for needle in case.must_not_contain:
        if needle in text:
            return f"the answer contains {needle!r}"
    if case.check is not None and 200 <= status < 300:
        return case.check(payload)
    return None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_hostile_request_gets_its_4xx_and_harms_nothing(backend: str) -> None:
    async with live_server(backend, max_body_bytes=BODY_LIMIT) as live:
        cases = build_cases(live.ids)
        assert len(cases) >= MIN_CASES, len(cases)
        failures: List[str] = []
        async with aiohttp.ClientSession(auto_decompress=True) as session:
            for case in cases:
                try:
                    status, body, payload = await send(session, live, case)
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    failures.append(f"[{case.name}] request failed: {exc!r}")
                    status, body, payload = -1, b"", None
                else:
                    problem = judge(case, status, body, payload)
                    if problem is not None:
                        failures.append(f"[{case.name}] {case.method} {case.path}: {problem}")
                harmed = await still_healthy(session, live)
                if harmed is not None:
                    failures.append(f"[{case.name}] afterwards: {harmed}")
        summary = f"{backend}: {len(cases)} cases {describe(cases)}, {len(failures)} failures"
        print(summary)
        assert not failures, summary + "\n" + "\n".join(failures)
