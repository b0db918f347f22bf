"""Where an export reads from: a running store server (URL + optional token) or a database (SQLite file or URL).

Both are named as everywhere else in rollouthub (:mod:`rollouthub.store.locations`): a store server by any URL it
prints (``http://127.0.0.1:4747``, ``.../``, ``.../v1/agl``) or a bare ``host:port``; a database by a path,
``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``postgresql://...``. An export never creates a database.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator, Optional

from rollouthub.store.locations import Backend, LocationError, parse_backend, store_root_url

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["ExportSourceError", "open_source", "resolve_database", "resolve_store_url", "describe_source"]


class ExportSourceError(ValueError):
    """The source cannot be opened; the message is one line saying why."""


def resolve_database(database: str) -> Backend:
    """The existing database ``database`` names (a SQLite file must exist); :class:`ExportSourceError` otherwise."""
    try:
        return parse_backend(database, allow_memory=False, must_exist=True)
    except LocationError as exc:
        raise ExportSourceError(str(exc)) from None


def resolve_store_url(store_url: str) -> str:
    """The root URL of the store server ``store_url`` names; :class:`ExportSourceError` for a malformed one."""
    try:
        return store_root_url(store_url)
    except LocationError as exc:
        raise ExportSourceError(str(exc)) from None


def describe_source(*, store_url: Optional[str] = None, database: Optional[str] = None) -> str:
    """What a message shows for the source: ``store server http://...`` or ``SQLite file /abs/x.db``."""
    if store_url is not None:
        return f"store server {resolve_store_url(store_url)}"
    if database is None:
        raise ExportSourceError("give exactly one source: a store URL or a database")
    return resolve_database(database).describe()


@asynccontextmanager
async def open_source(
    *, store_url: Optional[str] = None, api_token: Optional[str] = None, database: Optional[str] = None
) -> AsyncIterator[LightningStore]:
    """Open the store to read from: ``store_url`` (a ``LightningStoreClient``; ``api_token`` defaults to
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
            resolve_store_url(store_url),
            api_token=resolve_api_token(api_token),
            retry_delays=(1.0, 2.0),
            health_retry_delays=(),
        )
        try:
            yield client
        finally:
            await client.close()
        return
    from rollouthub.store.sql import SqlLightningStore

    store = SqlLightningStore(resolve_database(database).url)  # type: ignore[arg-type]
    try:
        await store.initialize()
        yield store
    finally:
        await store.close()
