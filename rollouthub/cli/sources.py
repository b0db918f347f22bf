"""What the commands that read a store share (``rollouthub export``, ``rollouthub inspect``): the source options --
``--store URL`` (with ``--api-token``) or ``--db PATH_OR_URL``, default ``./rollouthub.db`` -- and one-line errors
with truthful exit codes while reading (1: the source cannot be used or read; 130: interrupted)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Optional, Tuple, TypeVar

__all__ = ["DEFAULT_DATABASE", "Source", "add_source_arguments", "source_from_args", "fail", "run_reading"]

T = TypeVar("T")

DEFAULT_DATABASE = "rollouthub.db"
"""The database read when neither ``--store`` nor ``--db`` is given (the default of ``rollouthub store``)."""


@dataclass(frozen=True)
class Source:
    """Exactly one of ``store_url`` (normalised to the server's root URL) and ``database`` (a SQL URL), and what a
    message calls it."""

    store_url: Optional[str]
    database: Optional[str]
    api_token: Optional[str]
    description: str


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--store``, ``--api-token`` and ``--db`` to ``parser``."""
    group = parser.add_argument_group(f"source (default: --db ./{DEFAULT_DATABASE})")
    group.add_argument(
        "--store",
        metavar="URL",
        help="A running store server: any URL it prints (http://127.0.0.1:4747, .../v1/agl) or host:port.",
    )
    group.add_argument("--api-token", help="Bearer token for --store (default: $ROLLOUTHUB_API_TOKEN).")
    group.add_argument(
        "--db",
        metavar="PATH_OR_URL",
        help="A database: a SQLite file (path, sqlite:///relative.db, sqlite:////absolute.db) or postgresql://...",
    )


def source_from_args(args: argparse.Namespace) -> Source:
    """The source ``args`` name.

    Raises:
        ValueError: ``--store`` and ``--db`` both given (a usage error).
        rollouthub.export.ExportSourceError: the named source cannot be used (a missing database file, a malformed
            URL); one line.
    """
    from rollouthub.export.sources import ExportSourceError, resolve_database, resolve_store_url

    if args.store and args.db:
        raise ValueError("give either --store or --db, not both")
    if args.store:
        url = resolve_store_url(args.store)
        return Source(url, None, args.api_token, f"store server {url}")
    if args.db is None and not os.path.exists(DEFAULT_DATABASE):
        raise ExportSourceError(f"no database at ./{DEFAULT_DATABASE}; pass --db PATH or --store URL")
    backend = resolve_database(args.db or DEFAULT_DATABASE)
    return Source(None, backend.url, None, backend.describe())


def fail(prog: str, message: str, code: int) -> int:
    """Print ``<prog>: error: <message>`` (one line) on stderr and return ``code``."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def run_reading(
    prog: str, source: Source, read: Callable[[], Coroutine[Any, Any, T]], *, interrupted: str = "interrupted"
) -> Tuple[Optional[T], int]:
    """Run ``read()`` in a new event loop: ``(its result, 0)``, or ``(None, exit status)`` after one line on stderr --
    1 for a source that cannot be used or read (or a missing extra), 130 on Ctrl+C (with ``interrupted``)."""
    from rollouthub.export.sources import ExportSourceError
    from rollouthub.utils.extras import MissingExtraError

    try:
        return asyncio.run(read()), 0
    except (MissingExtraError, ExportSourceError) as exc:
        return None, fail(prog, str(exc), 1)
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return None, 130
    except Exception as exc:  # noqa: BLE001 - a store that cannot be reached or read: one line, no traceback
        return None, fail(prog, f"cannot read the {source.description}: {type(exc).__name__}: {exc}", 1)
