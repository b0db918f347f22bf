"""The quickstart's command line: the shared run (store server, log, progress, summary, exit code) around a mode.

Modes: APO today (the default). A mode is a module with ``add_arguments(parser, env_endpoint)``, ``check(args)``
(one-line :class:`QuickstartError` before any work starts; returns what ``run`` needs), ``preload()`` (heavy imports
while the store starts) and ``run(session, checked)`` (trains, prints its result, returns an :class:`Outcome`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from contextlib import ExitStack
from typing import Any, Dict, List, Optional

from rollouthub.cli.arguments import OneLineErrorParser, port_number, positive_int
from rollouthub.quickstart import apo, rl
from rollouthub.quickstart.endpoint import ENV_ENDPOINT
from rollouthub.quickstart.processes import free_port, launch_store, stop_store, wait_for_store
from rollouthub.quickstart.session import QuickstartError, Session, UsageError
from rollouthub.store.locations import Backend, LocationError, parse_backend
from rollouthub.utils.process_lifetime import exit_code_of, sigterm_raises

__all__ = ["DEFAULT_DB", "DEFAULT_LOG", "MODES", "build_parser", "main"]

DEFAULT_DB = "rollouthub-quickstart.db"
DEFAULT_LOG = "rollouthub-quickstart.log"
MODES: Dict[str, Any] = {"apo": apo, "rl": rl}
"""The training modes by name (``args.mode``)."""

DESCRIPTION = f"""The main job: an end-to-end prompt-optimisation run, offline, on the embedded default store (a SQLite file).

``python -m rollouthub.quickstart``:

1. starts ``rollouthub store`` on ``./{DEFAULT_DB}`` (SQLite) on a free port;
2. starts the built-in mock OpenAI-compatible LLM (:mod:`rollouthub.testing`) -- or, with ``--llm-endpoint``, uses
   a real OpenAI-compatible endpoint (``OPENAI_BASE_URL`` when no URL is given; ``OPENAI_API_KEY``), checked first
   with one real chat completion;
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

Files: the database is the ``.db`` file alone once the quickstart has exited (its write-ahead log is folded into it
when the store stops). The log is appended to ``./{DEFAULT_LOG}`` (``--log PATH`` to choose), never written beside
``--db``.

``--rl`` trains the agent's own model instead (needs the ``[train]`` extra: torch, transformers): a tiny model built
from a config (no download) learns to reply with the last letter of a word with GRPO. Runner processes call the policy
through the LLM proxy; the trainer prints one line per step (eval reward when evaluated, training reward, rollouts/s),
stops at the first held-out evaluation reaching ``--target`` (0.9), and prints the eval reward per policy version
and where the checkpoints are. The dashboard's learning curve shows the run's ``val`` reward per policy version.

``--summary-json PATH`` (both modes) writes what the run printed at the end as JSON: for APO the best prompt and
its score; for RL ``initial_eval_reward``, ``final_eval_reward``, ``steps``, ``policy_versions``,
``checkpoint_dir``, ``seconds`` and the eval reward per policy version.

Exit status: 0 when the run finished (RL: reaching ``--target``); 1 when it failed (one line on stderr, e.g. the
port is in use, the ``[train]`` extra is missing, or the RL run ended below its target); 2 for a
bad flag value; 130 after Ctrl+C and 143 after SIGTERM during the run (the runners and the store are stopped, and
the run's unfinished rollouts are cancelled so that a later run never executes them). With ``--keep-serving``, Ctrl+C
or SIGTERM once the run has finished ends the serving: exit 0.
"""


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags of the quickstart."""
    from rollouthub.cli import plain_text

    parser = OneLineErrorParser(
        prog="python -m rollouthub.quickstart",
        description=plain_text(DESCRIPTION),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(mode="apo")
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        help=f"The store's database: a SQLite file (path or sqlite:///path) or a PostgreSQL URL (default: ./{DEFAULT_DB}).",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="Delete the SQLite file (and its -wal/-shm) first instead of reusing it."
    )
    parser.add_argument("--port", type=port_number, default=None, help="Store server port (default: a free port).")
    parser.add_argument("--runners", type=positive_int, default=4, help="Runner processes (default: 4).")
    for mode in MODES.values():
        mode.add_arguments(parser, ENV_ENDPOINT)
    parser.add_argument(
        "--summary-json",
        default=None,
        metavar="PATH",
        help="Write what the run printed at the end here, as JSON (both modes).",
    )
    parser.add_argument("--keep-serving", action="store_true", help="Keep the store and dashboard up until Ctrl+C.")
    parser.add_argument(
        "--log", default=DEFAULT_LOG, metavar="PATH", help=f"Log file, appended to (default: ./{DEFAULT_LOG})."
    )
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
    """Run the quickstart; returns the process exit code (0 done, 1 failed, 2 bad usage, 130/143 interrupted)."""
    args = build_parser().parse_args(argv)
    try:
        with sigterm_raises():
            return _run(args)
    except QuickstartError as exc:
        print(f"rollouthub quickstart: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl+C, or SIGTERM (Terminated)
        code = exit_code_of(exc)
        how = "SIGTERM" if code == 143 else "Ctrl+C"
        print(f"Interrupted: {how} stopped the run before it finished (exit {code}).", file=sys.stderr)
        return code


def _backend(args: argparse.Namespace) -> Backend:
    try:
        backend = parse_backend(args.db, allow_memory=False)
    except LocationError as exc:
        raise UsageError(f"--db: {exc}") from None
    if args.fresh and backend.kind != "sqlite":
        raise UsageError(f"--fresh deletes a SQLite file; {backend.describe()} is not one")
    return backend


def _log_path(args: argparse.Namespace) -> str:
    path = os.path.abspath(args.log)
    if not os.path.isdir(os.path.dirname(path)):
        raise UsageError(f"--log: the directory {os.path.dirname(path)} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"--log: {path} is a directory")
    return path


def _delete_sqlite_files(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def _summary_path(args: argparse.Namespace) -> None:
    """``--summary-json`` must be writable where it points (checked before the run)."""
    if args.summary_json is None:
        return
    path = os.path.abspath(args.summary_json)
    if not os.path.isdir(os.path.dirname(path)):
        raise UsageError(f"--summary-json: the directory {os.path.dirname(path)} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"--summary-json: {path} is a directory")


def _write_summary(path: str, mode: str, outcome: Any, stats: Dict[str, Any], data: str) -> None:
    values = {
        "mode": mode,
        **outcome.summary,
        "elapsed": round(outcome.elapsed, 1),
        "rollouts_this_run": outcome.rollouts_this_run,
        "data": data,
        "store_totals": {key: stats.get(f"total_{key}") for key in ("rollouts", "spans", "workers")},
        "failure": outcome.failure,
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=1)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    mode = MODES[args.mode]
    console = Console(soft_wrap=True)  # never break paths and URLs
    backend = _backend(args)
    log_path = _log_path(args)
    _summary_path(args)
    checked = mode.check(args)
    if args.fresh and backend.path is not None:
        _delete_sqlite_files(backend.path)
    data = backend.path if backend.path is not None else backend.describe()
    data_line = f"Data: {data} (SQLite; log: {log_path})" if backend.path else f"Data: {data} (log: {log_path})"
    _configure_logging(log_path)
    port = args.port or free_port()

    with ExitStack() as stack:
        if backend.path is not None:
            action = "reusing" if os.path.exists(backend.path) else "creating"
            console.print(f"[bold]rollouthub quickstart[/bold]: {action} {backend.path}")
        else:
            console.print(f"[bold]rollouthub quickstart[/bold]: using {data}", markup=False, highlight=False)
        store = launch_store(backend.url, port, log_path)
        stack.callback(stop_store, store)
        mode.preload()  # while the store starts
        wait_for_store(store)
        console.print(f"store server: {store.url}  (dashboard: {store.url}/)")
        session = Session(args, console, stack, store.url, data, log_path)
        outcome = mode.run(session, checked)
        stats = asyncio.run(_statistics(store.url))
        console.print(
            f"Trained in {outcome.elapsed:.1f}s with {args.runners} runners; {outcome.rollouts_this_run} rollouts "
            f"this run. Store totals: {stats.get('total_rollouts')} rollouts, {stats.get('total_spans')} spans, "
            f"{stats.get('total_workers')} workers."
        )
        console.print(data_line, markup=False, highlight=False)
        if args.summary_json:
            _write_summary(args.summary_json, args.mode, outcome, stats, data)
            console.print(f"Summary: {os.path.abspath(args.summary_json)}", markup=False, highlight=False)
        if outcome.failure is not None:
            raise QuickstartError(outcome.failure)
        if args.keep_serving:
            console.print(f"Dashboard: {store.url}/  (serving until Ctrl+C)")
            try:
                store.process.wait()
            except KeyboardInterrupt:  # Ctrl+C or SIGTERM: the normal end of serving (the job has finished)
                pass
            if store.process.returncode not in (None, 0):
                raise QuickstartError(f"the store server stopped with code {store.process.returncode}")
        else:
            # The store stops with this process: only print what works afterwards.
            shown_url = backend.url if backend.path else backend.describe().split(" ", 1)[1]  # no password shown
            console.print(
                f"Browse it later: rollouthub store --backend {shown_url}  then open http://127.0.0.1:4747/",
                markup=False,
                highlight=False,
            )
    return 0
