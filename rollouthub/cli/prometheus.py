"""``rollouthub prometheus``: expose a Prometheus multiprocess directory over HTTP.

Useful when several store worker processes write metrics into ``PROMETHEUS_MULTIPROC_DIR``: this separate process
aggregates and serves them at ``<metrics-path>/`` (default ``/v1/prometheus/``), plus ``GET /health``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any, Optional, Sequence

__all__ = ["main", "build_parser", "build_app"]

logger = logging.getLogger("rollouthub.cli.prometheus")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rollouthub prometheus``."""
    parser = argparse.ArgumentParser(prog="rollouthub prometheus", description="Serve Prometheus multiprocess metrics.")
    parser.add_argument("--host", default="127.0.0.1", help="Bind address (default: 127.0.0.1).")
    parser.add_argument("--port", type=int, default=4748, help="Port (default: 4748).")
    parser.add_argument("--metrics-path", default="/v1/prometheus", help="Mount path (default: /v1/prometheus).")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--access-log", action="store_true", help="Enable access logs.")
    return parser


def build_app(metrics_path: str) -> Any:
    """A FastAPI app with the multiprocess registry mounted at ``metrics_path`` and ``GET /health``."""
    if not metrics_path.startswith("/") or metrics_path == "/":
        raise ValueError("--metrics-path must start with '/' and must not be '/'")
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        raise ValueError("PROMETHEUS_MULTIPROC_DIR must be set to the directory the store workers write to")
    os.makedirs(directory, exist_ok=True)
    from fastapi import FastAPI

    from rollouthub.utils.metrics import get_prometheus_registry, mount_prometheus

    registry = get_prometheus_registry()  # MissingExtraError (an ImportError) without the [prometheus] extra
    app = FastAPI(title="rollouthub Prometheus exporter")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    mount_prometheus(app, metrics_path, registry)
    return app


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``rollouthub prometheus``; returns the exit status (1 on configuration or start-up errors)."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr)
    try:
        app = build_app(args.metrics_path)
    except (ValueError, ImportError) as exc:
        print(f"rollouthub prometheus: error: {exc}", file=sys.stderr)
        return 1
    from rollouthub.utils.server_launcher import PythonServerLauncher, PythonServerLauncherArgs

    launcher = PythonServerLauncher(
        app,
        PythonServerLauncherArgs(
            host=args.host,
            port=args.port,
            launch_mode="asyncio",
            healthcheck_url="/health",
            log_level=getattr(logging, args.log_level),
            access_log=args.access_log,
        ),
    )
    logger.info("Serving Prometheus metrics at %s%s/", launcher.access_endpoint, args.metrics_path.rstrip("/"))
    try:
        asyncio.run(launcher.run_forever())
    except RuntimeError as exc:
        logger.error("Cannot start: %s", exc)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
