"""Server CPU per refresh of the dashboard's live learning curve (issue 18 follow-up).

The rollouts page's summary refreshes every 5 s: 7 status counts
(``GET /v1/agl/rollouts?limit=1&status_in=...``) and the learning curve's two requests, the final reward of every
finished rollout (``GET /v1/agl/export?format=rewards&status_in=succeeded&status_in=failed``) and the resources
list for the versions' order (``GET /v1/agl/resources?limit=-1``). This script fills a SQLite store with
``--rollouts`` finished rollouts (default 20 000; those of ``benchmarks/export_rss.py``: an LLM-call span and a
reward span each), starts ``rollouthub store`` on a copy of it and measures the server's CPU time (user + system)
per refresh of the summary, for:

* the **first** refresh after the server started,
* **steady**-state refreshes with nothing new,
* a refresh after ``--new`` (default 100) rollouts finished since the last one (written by this process into the
  same database, as a runner in another process would), and a refresh after one rollout got a late reward span and
  another a new attempt (retry) with a different reward -- both must show in the rows (checked).

``--checkout DIR`` runs the server from another checkout of rollouthub (e.g. a ``git worktree`` of the branch point),
with this interpreter: ``--checkout`` given several times runs each checkout ``--runs`` times, interleaved, for an
A/B comparison on one machine at one moment.

    python benchmarks/learning_curve.py
    python benchmarks/learning_curve.py --db /tmp/lc.db --keep --checkout /tmp/base --checkout . --runs 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, Tuple

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from export_rss import fill  # noqa: E402

from rollouthub.cli import plain_text  # noqa: E402

CURVE_QUERY = "export?format=rewards&status_in=succeeded&status_in=failed"
RESOURCES_QUERY = "resources?limit=-1&offset=0&sort_by=create_time&sort_order=asc"
STATUSES = ("queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing")
COUNT_QUERIES = [f"rollouts?limit=1&offset=0&sort_by=start_time&sort_order=desc&status_in={s}" for s in STATUSES]


def start_server(checkout: str, database: str) -> Tuple[subprocess.Popen[bytes], str]:
    """``rollouthub store`` from ``checkout`` on ``database``; returns the process and the API base URL."""
    from rollouthub.utils.server_launcher import pick_free_port

    port = pick_free_port()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", f"sqlite:///{database}", "--port", str(port)]
    server = subprocess.Popen(
        cmd + ["--log-level", "WARNING"], cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}/v1/agl/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "health", timeout=1).close()
            return server, base
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("the store did not start") from None
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def refresh(server: subprocess.Popen[bytes], base: str) -> Dict[str, Any]:
    """One refresh of the summary panel (its 7 status counts, the rewards export and the resources list, one after
    the other); the server's CPU seconds, the wall time and the reward rows by rollout id."""
    before = cpu_seconds(server.pid)
    started = time.perf_counter()
    for query in COUNT_QUERIES:
        urllib.request.urlopen(base + query, timeout=600).read()
    with urllib.request.urlopen(base + CURVE_QUERY, timeout=3600) as response:
        body = response.read()
    with urllib.request.urlopen(base + RESOURCES_QUERY, timeout=600) as response:
        response.read()
    wall = time.perf_counter() - started
    time.sleep(0.05)  # let the server finish the request's bookkeeping before reading its CPU time
    cpu = cpu_seconds(server.pid) - before
    rows = {row["rollout_id"]: row for row in map(json.loads, body.splitlines())}
    return {"cpu": cpu, "wall": wall, "rows": rows, "bytes": len(body)}


async def late_reward_and_retry(database: str) -> Tuple[str, str]:
    """Give one finished rollout a late reward span (9.0) and another a new attempt that finishes with reward 7.0."""
    from rollouthub.store.sql import SqlLightningStore
    from rollouthub.types import Span

    store = SqlLightningStore(f"sqlite:///{database}")
    try:
        page = await store.query_rollouts(status_in=["succeeded"], sort_by="start_time", limit=2)
        late, retried = page.items[0], page.items[1]

        def reward_span(rollout_id: str, attempt_id: str, sequence_id: int, value: float) -> Span:
            return Span.from_attributes(
                attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value},
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                sequence_id=sequence_id,
                name="agentlightning.annotation",
                start_time=time.time(),
                end_time=time.time(),
            )

        await store.add_span(reward_span(late.rollout_id, late.attempt.attempt_id, 100, 9.0))  # type: ignore[union-attr]
        attempt = (await store.start_attempt(retried.rollout_id, worker_id="bench")).attempt
        await store.add_span(reward_span(retried.rollout_id, attempt.attempt_id, 100, 7.0))
        await store.update_attempt(retried.rollout_id, attempt.attempt_id, status="succeeded")
        return late.rollout_id, retried.rollout_id
    finally:
        await store.close()


def one_finished_rollout(base: str) -> str:
    """The id of one finished rollout (for the warm-up request)."""
    with urllib.request.urlopen(base + "rollouts?limit=1&status_in=succeeded", timeout=60) as response:
        return str(json.loads(response.read())["items"][0]["rollout_id"])


def remove_database(path: str) -> None:
    """Remove a SQLite file and its WAL/SHM files."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def run_once(checkout: str, pristine: str, workdir: str, new: int, steady: int) -> Dict[str, Any]:
    """One server from ``checkout`` on a fresh copy of the pristine database; the figures of each refresh kind."""
    database = os.path.join(workdir, "run.db")
    remove_database(database)
    shutil.copyfile(pristine, database)
    server, base = start_server(checkout, database)
    try:
        warm_up = f"{base}export?format=rewards&rollout_id_in={one_finished_rollout(base)}"
        urllib.request.urlopen(warm_up, timeout=60).read()  # imports the export code
        out: Dict[str, Any] = {"first": refresh(server, base)}
        out["steady"] = [refresh(server, base) for _ in range(steady)]
        asyncio.run(fill(f"sqlite:///{database}", new))
        out["new"] = refresh(server, base)
        late, retried = asyncio.run(late_reward_and_retry(database))
        out["changed"] = refresh(server, base)
    finally:
        server.terminate()
        server.wait(30)
        remove_database(database)
    expected = len(out["first"]["rows"]) + new
    if len(out["new"]["rows"]) != expected:
        raise AssertionError(f"{len(out['new']['rows'])} rows after adding {new}, expected {expected}")
    rows = out["changed"]["rows"]
    if rows[late]["reward"] != 9.0 or rows[retried]["reward"] != 7.0:
        raise AssertionError(f"stale rewards after a late span / a retry: {rows[late]}, {rows[retried]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--db", default=None, help="SQLite file (filled when missing; default: a temporary file)")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary database")
    parser.add_argument("--new", type=int, default=100, help="Rollouts finished between two refreshes")
    parser.add_argument("--steady", type=int, default=3, help="Steady-state refreshes per run")
    parser.add_argument("--checkout", action="append", default=None, help="rollouthub checkout running the server")
    parser.add_argument("--runs", type=int, default=1, help="Runs per checkout (interleaved)")
    args = parser.parse_args()
    checkouts = args.checkout or [os.path.join(HERE, "..")]
    workdir = tempfile.mkdtemp(prefix="rollouthub-learning-curve-")
    pristine = os.path.abspath(args.db or os.path.join(workdir, "pristine.db"))
    try:
        if not os.path.exists(pristine):
            print(f"Filling {pristine} with {args.rollouts} rollouts...", file=sys.stderr)
            asyncio.run(fill(f"sqlite:///{pristine}", args.rollouts))
        print(f"Database: {pristine} ({os.path.getsize(pristine) / 2**20:.0f} MiB)", flush=True)
        for run in range(args.runs):
            for checkout in checkouts:
                result = run_once(checkout, pristine, workdir, args.new, args.steady)
                first, new, changed = result["first"], result["new"], result["changed"]
                steady = min((r["cpu"] for r in result["steady"]), default=float("nan"))
                print(
                    f"run {run + 1} {os.path.abspath(checkout)}: rows {len(first['rows'])} "
                    f"({first['bytes'] / 2**20:.1f} MiB)  server CPU per refresh: first {first['cpu']:.2f} s  "
                    f"steady {steady:.2f} s (best of {args.steady})  +{args.new} new {new['cpu']:.2f} s  "
                    f"late span + retry {changed['cpu']:.2f} s  (wall: first {first['wall']:.2f} s, "
                    f"+new {new['wall']:.2f} s)",
                    flush=True,
                )
    finally:
        if args.db is None and not args.keep:
            remove_database(pristine)
            os.rmdir(workdir)
        elif args.db is None:
            print(f"Kept {pristine}", file=sys.stderr)
        else:
            os.rmdir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
