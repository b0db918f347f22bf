"""Hostile input against a real ``rollouthub store`` process: a gzip bomb and a memory flood (issue 14).

``bomb`` -- starts ``rollouthub store --backend memory`` (default limits: 32 MiB body) and POSTs, ``--bombs`` times
(``--concurrency`` at once), a 1 MiB gzip body that inflates to 1 GiB to ``/v1/traces``, while a prober thread sends
``GET /v1/agl/health`` every 5 ms on its own keep-alive connection. Reports each bomb's status and latency, the health
probe latencies during the attack (p50/p99/max) and the server's RSS growth (peak ``VmHWM`` minus the RSS before).
Targets: every bomb answered 413 in under 1 s, RSS growth under 64 MiB, health p99 under 100 ms.

``flood`` -- starts ``rollouthub store --backend memory --memory-limit 64MiB`` and sends ``--spans`` spans of about
2 KB (``POST /v1/agl/spans``, ``--concurrency`` clients, ``--spans-per-rollout`` spans per rollout, rollouts started
one after the other), sampling the server's RSS. Then it queries the spans of the oldest and the newest rollout with
``LightningStoreClient``: the oldest must have been evicted (HTTP 410, ``LightningStoreEvictedError``, not retried) and
the newest must still be there. Target: RSS growth at most 2x the limit.

    python benchmarks/hostile_input.py                      # both
    python benchmarks/hostile_input.py bomb --bombs 10 --concurrency 2
    python benchmarks/hostile_input.py flood --spans 50000 --memory-limit 64MiB
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import threading
import time
import zlib
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from http_micro import HealthProber, percentile  # noqa: E402
from http_micro import _span as micro_span  # noqa: E402

from rollouthub.cli import plain_text  # noqa: E402
from rollouthub.testing.store_process import StoreProcess  # noqa: E402

GIB = 2**30
MIB = 2**20


# ---------------------------------------------------------------------------------------------------------------------
# Gzip bomb
# ---------------------------------------------------------------------------------------------------------------------


def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of zeros inflating to ``inflated`` bytes (1 GiB → about 1 MiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\x00" * (16 * MIB)
    parts = [compressor.compress(block) for _ in range(inflated // len(block))]
    parts.append(compressor.compress(b"\x00" * (inflated % len(block))))
    parts.append(compressor.flush())
    return b"".join(parts)


def _post(port: int, body: bytes) -> Dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    conn.request(
        "POST",
        "/v1/traces",
        body=body,
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
    )
    response = conn.getresponse()
    payload = response.read()
    elapsed = time.perf_counter() - started
    conn.close()
    return {"status": response.status, "seconds": round(elapsed, 4), "answer": payload[:200].decode("latin-1")}


def run_bomb(bombs: int, concurrency: int, inflated: int) -> Dict[str, Any]:
    """The gzip-bomb scenario (see the module documentation)."""
    body = gzip_bomb(inflated)
    with StoreProcess("--backend", "memory") as server:
        time.sleep(0.5)
        rss_before = server.rss_mib()
        results: List[Dict[str, Any]] = []
        lock = threading.Lock()

        def attacker(count: int) -> None:
            for _ in range(count):
                result = _post(server.port, body)
                with lock:
                    results.append(result)

        with HealthProber(server.endpoint + "/v1/agl/health", interval=0.005) as prober:
            time.sleep(0.3)
            baseline = len(prober.samples)
            started = time.perf_counter()
            threads = [threading.Thread(target=attacker, args=(bombs // concurrency,)) for _ in range(concurrency)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            attack_seconds = time.perf_counter() - started
            during = [sample * 1000 for sample in prober.samples[baseline:]]
        peak = server.peak_rss_mib()
    seconds = [r["seconds"] for r in results]
    return {
        "scenario": "bomb",
        "compressed_bytes": len(body),
        "inflated_bytes": inflated,
        "bombs": len(results),
        "concurrency": concurrency,
        "statuses": sorted({r["status"] for r in results}),
        "bomb_seconds_max": max(seconds),
        "bomb_seconds_median": statistics.median(seconds),
        "answer": results[0]["answer"] if results else "",
        "attack_seconds": round(attack_seconds, 3),
        "health_probes_during_attack": len(during),
        "health_failures": prober.failures,
        "health_p50_ms": round(percentile(during, 0.5), 2),
        "health_p99_ms": round(percentile(during, 0.99), 2),
        "health_max_ms": round(max(during), 2) if during else None,
        "rss_before_mib": round(rss_before, 1),
        "rss_peak_mib": round(peak, 1),
        "rss_growth_mib": round(peak - rss_before, 1),
        "targets_met": bool(
            results
            and all(r["status"] == 413 for r in results)
            and max(seconds) < 1.0
            and peak - rss_before < 64
            and during
            and percentile(during, 0.99) < 100
        ),
    }


# ---------------------------------------------------------------------------------------------------------------------
# Memory flood
# ---------------------------------------------------------------------------------------------------------------------


def _span(rollout_id: str, attempt_id: str, seq: int, payload: str) -> Dict[str, Any]:
    """``http_micro``'s span body with about 2 KB of attributes."""
    body = micro_span(rollout_id, attempt_id, seq)
    body["attributes"] = {"prompt": payload, "completion": payload[::-1], "tokens": seq}
    return body


async def _flood(
    endpoint: str, rss_mib: Callable[[], float], spans: int, per_rollout: int, concurrency: int
) -> Dict[str, Any]:
    import aiohttp

    base = endpoint + "/v1/agl"
    payload = "x" * 950  # two attributes of 950 characters: about 2 KB of JSON per span
    samples: List[float] = []
    rollouts: List[Dict[str, str]] = []
    async with aiohttp.ClientSession() as session:
        queue: asyncio.Queue[Optional[Dict[str, Any]]] = asyncio.Queue(maxsize=concurrency * 4)

        async def sender() -> None:
            while True:
                body = await queue.get()
                if body is None:
                    return
                async with session.post(base + "/spans", json=body) as response:
                    if response.status != 201:
                        raise RuntimeError(f"POST /spans answered {response.status}: {await response.text()}")

        workers = [asyncio.create_task(sender()) for _ in range(concurrency)]
        started = time.perf_counter()
        sent = 0
        while sent < spans:
            async with session.post(base + "/rollouts", json={"input": {"n": len(rollouts)}}) as response:
                attempted = await response.json()
            rollout = {"rollout_id": attempted["rollout_id"], "attempt_id": attempted["attempt"]["attempt_id"]}
            rollouts.append(rollout)
            for seq in range(1, min(per_rollout, spans - sent) + 1):
                await queue.put(_span(rollout["rollout_id"], rollout["attempt_id"], seq, payload))
                sent += 1
                if sent % 2000 == 0:
                    samples.append(rss_mib())
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
        seconds = time.perf_counter() - started
        async with session.get(base + "/statistics") as response:
            stats = await response.json()
    return {"rollouts": rollouts, "samples": samples, "seconds": seconds, "stats": stats}


async def _check_eviction(endpoint: str, oldest: str, newest: str) -> Dict[str, Any]:
    from rollouthub.store.client import LightningStoreClient, LightningStoreEvictedError

    client = LightningStoreClient(endpoint, retry_delays=(0.5, 0.5), health_retry_delays=())
    report: Dict[str, Any] = {}
    try:
        started = time.perf_counter()
        try:
            await client.query_spans(oldest)
            report["oldest"] = "still present (NOT evicted)"
        except LightningStoreEvictedError as exc:
            report["oldest"] = f"{exc.status} {type(exc).__name__}: {exc.detail}"
        report["oldest_query_seconds"] = round(time.perf_counter() - started, 3)  # no retries: one round trip
        newest_spans = await client.query_spans(newest)
        report["newest_spans"] = len(newest_spans)
    finally:
        await client.close()
    return report


def run_flood(spans: int, per_rollout: int, concurrency: int, memory_limit: str) -> Dict[str, Any]:
    """The memory-flood scenario (see the module documentation)."""
    from rollouthub.store.memory import parse_memory_limit

    limit_mib = parse_memory_limit(memory_limit) / MIB
    with StoreProcess("--backend", "memory", "--memory-limit", memory_limit) as server:
        time.sleep(0.5)
        rss_before = server.rss_mib()
        flood = asyncio.run(_flood(server.endpoint, server.rss_mib, spans, per_rollout, concurrency))
        rss_after = server.rss_mib()
        peak = server.peak_rss_mib()
        rollouts = flood["rollouts"]
        eviction = asyncio.run(_check_eviction(server.endpoint, rollouts[0]["rollout_id"], rollouts[-1]["rollout_id"]))
    stats = flood["stats"]
    growth = peak - rss_before
    return {
        "scenario": "flood",
        "spans": spans,
        "rollouts": len(rollouts),
        "memory_limit": memory_limit,
        "seconds": round(flood["seconds"], 1),
        "spans_per_second": round(spans / flood["seconds"]),
        "rss_before_mib": round(rss_before, 1),
        "rss_after_mib": round(rss_after, 1),
        "rss_peak_mib": round(peak, 1),
        "rss_growth_mib": round(growth, 1),
        "rss_growth_over_limit": round(growth / limit_mib, 2),
        "rss_samples_mib": [round(sample) for sample in flood["samples"]],
        "total_span_bytes": stats.get("total_span_bytes"),
        "eviction_threshold_bytes": stats.get("eviction_threshold_bytes"),
        "memory_limit_bytes": stats.get("memory_limit_bytes"),
        **eviction,
        "targets_met": growth <= 2 * limit_mib
        and "410" in str(eviction.get("oldest"))
        and eviction["newest_spans"] > 0,
    }


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", nargs="?", choices=["bomb", "flood", "all"], default="all")
    parser.add_argument("--bombs", type=int, default=10, help="bomb: requests sent (default 10)")
    parser.add_argument("--inflated", type=int, default=GIB, help="bomb: inflated size in bytes (default 1 GiB)")
    parser.add_argument("--spans", type=int, default=50_000, help="flood: spans sent (default 50 000)")
    parser.add_argument("--spans-per-rollout", type=int, default=100, help="flood: spans per rollout (default 100)")
    parser.add_argument("--memory-limit", default="64MiB", help="flood: --memory-limit of the server (default 64MiB)")
    parser.add_argument("--concurrency", type=int, default=None, help="concurrent clients (bomb: 2, flood: 4)")
    parser.add_argument("--json-out", default=None, help="append the results as JSON lines to this file")
    args = parser.parse_args()
    results: List[Dict[str, Any]] = []
    if args.scenario in ("bomb", "all"):
        results.append(run_bomb(args.bombs, args.concurrency or 2, args.inflated))
        print(json.dumps(results[-1], indent=2))
    if args.scenario in ("flood", "all"):
        results.append(run_flood(args.spans, args.spans_per_rollout, args.concurrency or 4, args.memory_limit))
        print(json.dumps(results[-1], indent=2))
    if args.json_out:
        with open(args.json_out, "a", encoding="utf-8") as handle:
            for result in results:
                handle.write(json.dumps(result) + "\n")
    sys.exit(0 if all(result["targets_met"] for result in results) else 1)


if __name__ == "__main__":
    main()
