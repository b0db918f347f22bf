"""The quickstart's command line: the shared run (store server, log, progress, summary, exit code) around a mode.

Modes: APO today (the default). A mode is a module with ``add_arguments(parser, env_endpoint)``, ``check(args)``
(one-line :class:`QuickstartError` before any work starts; returns what ``run`` needs), ``preload()`` (heavy imports
while the store starts) and ``run(session, checked)`` (trains, prints its result, returns an :class:`Outcome`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from contextlib import ExitStack
from typing import Any, Dict, List, Optional

from rollouthub.quickstart import apo
from rollouthub.quickstart.endpoint import ENV_ENDPOINT
from rollouthub.quickstart.processes import free_port, launch_store, stop_store, wait_for_store
from rollouthub.quickstart.session import QuickstartError, Session

__all__ = ["DEFAULT_DB", "MODES", "build_parser", "main"]

DEFAULT_DB = "rollouthub-quickstart.db"
MODES: Dict[str, Any] = {"apo": apo}
"""The training modes by name (``args.mode``)."""

DESCRIPTION = f"""The main job: an end-to-end prompt-optimisation run, offline, on the embedded default store (a SQLite file).

``python -m rollouthub.quickstart``:

1. starts ``rollouthub store`` on ``./{DEFAULT_DB}`` (SQLite) on a free port;
2. starts the built-in mock OpenAI-compatible LLM (:mod:`rollouthub.testing`) -- or, with ``--llm-endpoint``, uses
   a real OpenAI-compatible endpoint (``OPENAI_BASE_URL`` when no URL is given; ``OPENAI_API_KEY``), checked first;
3. trains with a :class:`~rollouthub.trainer.Trainer`: several runner processes execute a small sentiment agent while
   :class:`~rollouthub.algorithm.apo.APO` improves the agent's prompt by textual-gradient beam search;
4. shows live progress, then prints the best prompt, the dashboard URL and where the data is, and exits 0.

The mock LLM behaves like a model that only answers well when the prompt asks for it: a one-word answer format,
attention to sarcasm, and a rule for mixed reviews. Its "optimiser" answers critique requests with a missing
instruction (one of those the template still lacks) and edit requests by adding it, so APO climbs from about 0.25 to
1.0 in three rounds.

Running it again **reuses** the database: earlier rollouts, spans, workers and prompt resources stay and the new run
is appended (its prompts are new resources ``apo-<run>-v0``, ``apo-<run>-v1``, ...). ``--fresh`` deletes the
file (and its ``-wal``/``-shm`` companions) first. ``--keep-serving`` keeps the store (and its dashboard) running
after training until Ctrl+C.
"""


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags of the quickstart."""
    from rollouthub.cli import plain_text

    parser = argparse.ArgumentParser(
        prog="python -m rollouthub.quickstart",
        description=plain_text(DESCRIPTION),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(mode="apo")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file of the store (default: ./{DEFAULT_DB}).")
    parser.add_argument("--fresh", action="store_true", help="Delete the database file first instead of reusing it.")
    parser.add_argument("--port", type=int, default=None, help="Store server port (default: a free port).")
    parser.add_argument("--runners", type=int, default=4, help="Runner processes (default: 4).")
    for mode in MODES.values():
        mode.add_arguments(parser, ENV_ENDPOINT)
    parser.add_argument("--keep-serving", action="store_true", help="Keep the store and dashboard up until Ctrl+C.")
    return parser


def _configure_logging(log_path: str) -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    file_handler = logging.FileHandler(log_path, encoding="utf-8")
    file_handler.setFormatter(
        logging.Formatter("%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s", "%H:%M:%S")
    )
    root.addHandler(file_handler)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.ERROR)
    root.addHandler(console)
    for noisy in ("httpx", "httpx2", "openai", "uvicorn", "uvicorn.access", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def _statistics(store_url: str) -> Dict[str, Any]:
    from rollouthub.store.client import LightningStoreClient

    client = LightningStoreClient(store_url)
    try:
        return dict(await client.statistics())
    finally:
        await client.close()


def main(argv: Optional[List[str]] = None) -> int:
    """Run the quickstart; returns the process exit code."""
    args = build_parser().parse_args(argv)
    from rich.console import Console

    mode = MODES[args.mode]
    console = Console(soft_wrap=True)  # never break paths and URLs
    db_path = os.path.abspath(args.db)
    log_path = os.path.splitext(db_path)[0] + ".log"
    if args.fresh:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
        if os.path.exists(log_path):
            os.remove(log_path)
    try:
        checked = mode.check(args)
    except QuickstartError as exc:
        print(f"rollouthub quickstart: error: {exc}", file=sys.stderr)
        return 1
    reused = os.path.exists(db_path)
    _configure_logging(log_path)
    port = args.port or free_port()
    store_url = f"http://127.0.0.1:{port}"

    with ExitStack() as stack:
        console.print(f"[bold]rollouthub quickstart[/bold]: {'reusing' if reused else 'creating'} {db_path}")
        store_process = launch_store(db_path, port, log_path)
        stack.callback(stop_store, store_process)
        mode.preload()  # while the store starts
        wait_for_store(store_process, port, log_path)
        console.print(f"store server: {store_url}  (dashboard: {store_url}/)")
        session = Session(args, console, stack, store_url, db_path, log_path)
        outcome = mode.run(session, checked)
        if outcome is None:
            console.print(f"Data: {db_path} (SQLite; log: {log_path})")
            return 130
        stats = asyncio.run(_statistics(store_url))
        console.print(
            f"Trained in {outcome.elapsed:.1f}s with {args.runners} runners; {outcome.rollouts_this_run} rollouts "
            f"this run. Store totals: {stats.get('total_rollouts')} rollouts, {stats.get('total_spans')} spans, "
            f"{stats.get('total_workers')} workers."
        )
        console.print(f"Data: {db_path} (SQLite; log: {log_path})")
        if args.keep_serving:
            console.print(f"Dashboard: {store_url}/  (serving until Ctrl+C)")
            try:
                while store_process.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        else:
            # The store stops with this process: only print what works afterwards.
            console.print(
                f"Browse it later: rollouthub store --backend sqlite:///{db_path}  then open http://127.0.0.1:4747/",
                markup=False,
                highlight=False,
            )
    return 0
