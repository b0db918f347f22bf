"""Where an export reads from: a running store server (URL + optional token) or a database (SQLite file or URL)."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator, Optional

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["ExportSourceError", "open_source", "database_url"]


class ExportSourceError(ValueError):
    """The source cannot be opened; the message is one line saying why."""


def database_url(database: str) -> str:
    """A SQL URL for ``database``: URLs pass through; a path becomes ``sqlite:///<absolute path>`` and must exist (an
    export never creates a database)."""
    if "://" in database:
        if database.startswith("sqlite"):
            path = database.split(":///", 1)[-1]
            if path and path != ":memory:" and not os.path.exists(path):
                raise ExportSourceError(f"no database at {path}")
        return database
    path = os.path.abspath(database)
    if not os.path.isfile(path):
        raise ExportSourceError(f"no database at {path}")
    return f"sqlite:///{path}"


@asynccontextmanager
async def open_source(
    *, store_url: Optional[str] = None, api_token: Optional[str] = None, database: Optional[str] = None
) -> AsyncIterator[LightningStore]:
    """Open the store to export from: ``store_url`` (a ``LightningStoreClient``; ``api_token`` defaults to
    ``$ROLLOUTHUB_API_TOKEN``) or ``database`` (a ``SqlLightningStore``); exactly one of them.

    A database is opened like by any store process: its watchdog may mark attempts whose heartbeats expired as the
    server would. Go through ``store_url`` to leave that to the running server.
    """
    if (store_url is None) == (database is None):
        raise ExportSourceError("give exactly one source: a store URL or a database")
    if store_url is not None:
        from rollouthub.env_var import resolve_api_token
        from rollouthub.store.client import LightningStoreClient

        client = LightningStoreClient(
            store_url, api_token=resolve_api_token(api_token), retry_delays=(1.0, 2.0), health_retry_delays=()
        )
        try:
            yield client
        finally:
            await client.close()
        return
    from rollouthub.store.sql import SqlLightningStore

    store = SqlLightningStore(database_url(database))  # type: ignore[arg-type]
    try:
        await store.initialize()
        yield store
    finally:
        await store.close()
