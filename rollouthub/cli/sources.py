"""The source options shared by the commands that read a store (``rollouthub export``, ``rollouthub inspect``):
``--store URL`` (with ``--api-token``) or ``--db PATH_OR_URL``, default ``./rollouthub.db``."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Optional

__all__ = ["DEFAULT_DATABASE", "Source", "add_source_arguments", "source_from_args"]

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
