"""``rollouthub store``: run the LightningStore server (``agl store`` flags plus ``--backend``, auth and limits).

Exit status: 0 after a clean shutdown (Ctrl+C / SIGTERM), 1 when the server cannot start (e.g. the port is already in
use), 2 for invalid arguments (e.g. ``--n-workers 2 --backend memory``).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import gc
import logging
import os
import shutil
import signal
import sys
from typing import Any, List, Optional, Sequence

__all__ = [
    "main",
    "build_parser",
    "DEFAULT_BACKEND",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_LIMIT_CONCURRENCY",
    "DEFAULT_TIMEOUT_KEEP_ALIVE",
]

logger = logging.getLogger("rollouthub.cli.store")

DEFAULT_BACKEND = "sqlite:///./rollouthub.db"
"""A SQLite file in the working directory."""

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024

DEFAULT_LIMIT_CONCURRENCY = 2048
"""Connections (or requests in progress) beyond which new requests get 503 instead of exhausting the server."""

DEFAULT_TIMEOUT_KEEP_ALIVE = 30
"""Seconds a connection stays open idle after a response."""

_FD_HEADROOM = 256
"""File descriptors kept for the database, logs and the listening socket on top of ``--limit-concurrency``."""

_SQL_PREFIXES = ("sqlite", "postgresql", "postgres")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rollouthub store``."""
    parser = argparse.ArgumentParser(prog="rollouthub store", description="Run the LightningStore server.")
    parser.add_argument("--host", default="127.0.0.1", help="Bind address (default: 127.0.0.1, loopback only).")
    parser.add_argument("--port", type=int, default=4747, help="Port (default: 4747).")
    parser.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        help="'memory' for the in-memory store, or a SQL URL (sqlite:///path.db, postgresql://...). "
        f"Default: {DEFAULT_BACKEND}.",
    )
    parser.add_argument(
        "--n-workers",
        type=int,
        default=1,
        help="Number of server processes sharing the port (> 1 requires a SQL backend).",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument(
        "--tracker", nargs="+", choices=["prometheus", "console"], default=None, help="Metrics backend(s)."
    )
    parser.add_argument(
        "--cors-origin", action="append", default=None, dest="cors_origins", help="Allowed CORS origin (repeatable)."
    )
    parser.add_argument(
        "--api-token",
        default=None,
        help="Require 'Authorization: Bearer <token>' on every route except health "
        "(default: $ROLLOUTHUB_API_TOKEN; unset = no authentication).",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"Largest accepted request body in bytes; larger bodies get 413 (default: {DEFAULT_MAX_BODY_BYTES}).",
    )
    parser.add_argument(
        "--memory-limit",
        default=None,
        metavar="SIZE|PCT",
        help="--backend memory: bound on the memory held by spans, e.g. 64MiB, 2G, 25%% (of the RAM); above it the "
        "spans of the oldest rollouts are evicted. Default: the smaller of 2 GiB and 25%% of the RAM.",
    )
    parser.add_argument(
        "--timeout-keep-alive",
        type=int,
        default=DEFAULT_TIMEOUT_KEEP_ALIVE,
        metavar="SECONDS",
        help="Close a connection idle for this long after a response (uvicorn bounds no other wait: see "
        f"docs/server.md, 'Slow and dawdling clients'). Default: {DEFAULT_TIMEOUT_KEEP_ALIVE}.",
    )
    parser.add_argument(
        "--limit-concurrency",
        type=int,
        default=DEFAULT_LIMIT_CONCURRENCY,
        metavar="N",
        help="With N open connections or N requests in progress, answer new requests with 503 "
        f"(the open-files limit is raised to fit when allowed). Default: {DEFAULT_LIMIT_CONCURRENCY}.",
    )
    parser.add_argument(
        "--max-header-bytes",
        type=int,
        default=None,
        metavar="N",
        help="Largest request head (request line and headers); one growing larger gets 400 and its connection is "
        "closed. Given, the server uses uvicorn's h11 HTTP protocol, the one that takes a configurable bound (about 3x "
        "the HTTP CPU per request). Default: uvicorn's zttp protocol and its fixed bounds (16 KiB per request or "
        "header line, 100 header lines, about 64 KiB in all); where zttp is not installed (Python 3.10), h11 bounded "
        "at 65536 bytes.",
    )
    parser.add_argument("--access-log", action="store_true", help="Log every request (uvicorn access log).")
    return parser


def _raise_open_files_limit(needed: int) -> None:
    """Raise the soft limit of open files to ``needed`` (at most the hard limit); warn when it stays below."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        if soft < needed:
            logger.warning(
                "The open-files limit (%d) is below --limit-concurrency plus headroom (%d): connections beyond it are "
                "refused by the operating system instead of answered 503.",
                soft,
                needed,
            )


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("rollouthub").setLevel(getattr(logging, level))


def _build_tracker(names: Optional[List[str]], n_workers: int) -> Any:
    if not names:
        return None
    from rollouthub.utils.metrics import (
        ConsoleMetricsBackend,
        MultiMetricsBackend,
        PrometheusMetricsBackend,
        setup_multiprocess_prometheus,
    )

    backends: List[Any] = []
    if "prometheus" in names:
        if n_workers > 1:
            preset = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
            directory = setup_multiprocess_prometheus()
            if not preset:  # we created it: remove it when the server exits
                atexit.register(shutil.rmtree, directory, True)
        backends.append(PrometheusMetricsBackend())
    if "console" in names:
        backends.append(ConsoleMetricsBackend())
    return backends[0] if len(backends) == 1 else MultiMetricsBackend(backends)


GC_THRESHOLDS = (10_000, 10, 10)
"""``gc.set_threshold`` of a ``rollouthub store`` process once it serves (Python's default is ``(700, 10, 10)``)."""


def _build_store(backend: str, tracker: Any, memory_limit: Optional[str] = None) -> Any:
    if backend == "memory":
        from rollouthub.store.memory import InMemoryLightningStore, default_memory_limit

        limit: Any = memory_limit if memory_limit is not None else default_memory_limit()
        return InMemoryLightningStore(thread_safe=True, tracker=tracker, memory_limit=limit)
    from rollouthub.store.sql import SqlLightningStore

    return SqlLightningStore(backend, tracker=tracker)


def _is_sql(backend: str) -> bool:
    return backend.split(":", 1)[0].split("+", 1)[0].lower() in _SQL_PREFIXES


async def _serve(server: Any, backend_label: str) -> int:
    from rollouthub.utils.server_launcher import PortBindError, describe_request_head_bound

    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    stop_requested = asyncio.Event()

    def request_stop() -> None:
        if not stop_requested.is_set():
            stop_requested.set()
            logger.info("Shutting down the store server...")

    installed: List[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, request_stop)
            installed.append(sig)
    try:
        store = server.store
        if server.launcher_args.launch_mode == "asyncio" and hasattr(store, "initialize"):
            # Served from this event loop: open (create or check) the database now, so that a bad database fails
            # the start-up instead of the first request, and the first request does not pay for it.
            try:
                await store.initialize()
            except Exception as exc:  # noqa: BLE001 - report without a traceback
                logger.error("Cannot open the store backend: %s", exc)
                return 1
        try:
            await server.start()
        except PortBindError:  # already logged once by the launcher, in one line
            return 1
        except RuntimeError as exc:
            if stop_requested.is_set():  # interrupted while starting up
                return 0
            logger.error("Cannot start the store server: %s", exc)
            return 1
        # Everything alive now (modules, app, store) lives as long as the server: keep it out of the cyclic garbage
        # collector's full passes, which would otherwise walk it again and again under load. Requests allocate a lot
        # of short-lived objects and few cycles: young collections every 10 000 allocations instead of 700 (about 3 %
        # less server CPU in the full-stack benchmark; pending cyclic garbage stays bounded by that count).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        endpoint = server.endpoint
        logger.info("Store backend: %s", backend_label)
        args = server.launcher_args
        logger.info(
            "Limits:        body %d bytes, request head %s, %s concurrent connections, keep-alive %d s",
            server.max_body_bytes,
            describe_request_head_bound(args.max_header_bytes),
            args.limit_concurrency,
            args.timeout_keep_alive,
        )
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            logger.info(
                "Serving on %s: request heads are bounded but not timed out; on untrusted networks put a reverse "
                "proxy with client timeouts in front (docs/server.md, 'Slow and dawdling clients').",
                args.host,
            )
        logger.info("Store API:     %s/v1/agl (health: %s/v1/agl/health)", endpoint, endpoint)
        logger.info("OTLP traces:   %s/v1/traces", endpoint)
        if server.prometheus_enabled:
            logger.info("Prometheus:    %s/v1/prometheus/", endpoint)
        if server.dashboard_enabled:
            logger.info("Dashboard:     %s/", endpoint)
        else:
            logger.info("Dashboard:     not available (no dashboard bundle installed)")
        launcher = server.server_launcher
        while launcher.is_running() and not stop_requested.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop_requested.wait(), timeout=0.2)
        await server.stop()
        logger.info("Store server stopped.")
        return 0
    except asyncio.CancelledError:
        uncancel = getattr(main_task, "uncancel", None)  # Python >= 3.11
        if uncancel is not None:
            uncancel()
        with contextlib.suppress(Exception):
            await server.stop()
        return 0
    finally:
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``rollouthub store``; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    backend: str = args.backend
    if backend != "memory" and not _is_sql(backend):
        parser.print_usage(sys.stderr)
        print(
            f"rollouthub store: error: unsupported --backend {backend!r}; use 'memory' or a sqlite:// / "
            "postgresql:// URL",
            file=sys.stderr,
        )
        return 2
    if args.n_workers < 1:
        print("rollouthub store: error: --n-workers must be at least 1", file=sys.stderr)
        return 2
    if args.n_workers > 1 and backend == "memory":
        print(
            "rollouthub store: error: --n-workers > 1 needs a backend shared by all worker processes; the in-memory "
            "store lives in a single process. Use a SQL backend (e.g. --backend sqlite:///./rollouthub.db) or "
            "--n-workers 1.",
            file=sys.stderr,
        )
        return 2
    for flag, value in (
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-header-bytes", args.max_header_bytes),
        ("--limit-concurrency", args.limit_concurrency),
        ("--timeout-keep-alive", args.timeout_keep_alive),
    ):
        if value is not None and value <= 0:
            print(f"rollouthub store: error: {flag} must be positive", file=sys.stderr)
            return 2
    if args.memory_limit is not None:
        if backend != "memory":
            print("rollouthub store: error: --memory-limit only applies to --backend memory", file=sys.stderr)
            return 2
        from rollouthub.store.memory import parse_memory_limit

        try:
            parse_memory_limit(args.memory_limit)
        except ValueError as exc:
            print(f"rollouthub store: error: --memory-limit: {exc}", file=sys.stderr)
            return 2
    _configure_logging(args.log_level)

    from rollouthub.env_var import resolve_api_token
    from rollouthub.store.client_server import LightningStoreServer
    from rollouthub.utils.extras import MissingExtraError
    from rollouthub.utils.server_launcher import PythonServerLauncherArgs, run_event_loop

    try:
        tracker = _build_tracker(args.tracker, args.n_workers)
    except MissingExtraError as exc:
        print(f"rollouthub store: error: {exc}", file=sys.stderr)
        return 1
    try:
        store = _build_store(backend, tracker, args.memory_limit)
    except Exception as exc:  # noqa: BLE001 - report configuration errors without a traceback
        logger.error("Cannot open the %r backend: %s", backend, exc)
        return 1
    launcher_args = PythonServerLauncherArgs(
        host=args.host,
        port=args.port,
        launch_mode="mp" if args.n_workers > 1 else "asyncio",
        n_workers=args.n_workers,
        healthcheck_url="/v1/agl/health",
        log_level=getattr(logging, args.log_level),
        access_log=args.access_log,
        timeout_keep_alive=args.timeout_keep_alive,
        limit_concurrency=args.limit_concurrency,
        max_header_bytes=args.max_header_bytes,
    )
    _raise_open_files_limit(args.limit_concurrency + _FD_HEADROOM)
    try:
        server = LightningStoreServer(
            store,
            cors_allow_origins=args.cors_origins,
            launcher_args=launcher_args,
            tracker=tracker,
            api_token=resolve_api_token(args.api_token),
            max_body_bytes=args.max_body_bytes,
        )
    except ValueError as exc:
        print(f"rollouthub store: error: {exc}", file=sys.stderr)
        return 2
    if backend == "memory":
        label = f"memory (InMemoryLightningStore, spans bounded to {store.memory_limit_bytes / 2**20:.0f} MiB)"
    else:
        label = getattr(store, "database_url", backend)
    try:
        return run_event_loop(_serve(server, str(label)))
    except KeyboardInterrupt:
        return 0
