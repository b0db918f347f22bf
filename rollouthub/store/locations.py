"""One way to name a store, for every command: a backend (``rollouthub store --backend``, ``rollouthub export --db``,
the quickstart's ``--db``) and a running store server (``--store``).

A backend is ``memory``, a path to a SQLite file (``runs/my.db``), a SQLite URL (``sqlite:///runs/my.db``,
``sqlite:////abs/my.db``) or a PostgreSQL URL (``postgresql://user@host:5432/db``). Paths and SQLite URLs become
``sqlite:///<absolute path>``, so a message can always name the file.

A store server is named by any URL the server prints (``http://127.0.0.1:4747``, ``http://127.0.0.1:4747/``,
``http://127.0.0.1:4747/v1/agl``) or a bare ``host:port``; it becomes the server's root URL, which
:class:`~rollouthub.store.client.LightningStoreClient` takes.

Errors are :class:`LocationError` (a ``ValueError``) with a one-line message naming what is wrong.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from typing import Literal, Optional

__all__ = ["LocationError", "Backend", "parse_backend", "sqlite_path", "store_root_url", "API_PREFIX"]

API_PREFIX = "/v1/agl"
"""The path under which a store server answers its REST API."""

BackendKind = Literal["memory", "sqlite", "postgresql"]

_SQLITE_SCHEMES = ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite")
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg")


class LocationError(ValueError):
    """A backend or store URL that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class Backend:
    """A parsed backend: its kind, the URL a store opens (``memory`` for the in-memory store) and, for SQLite, the
    absolute path of the database file."""

    kind: BackendKind
    url: str
    path: Optional[str] = None

    def describe(self) -> str:
        """What a message shows: the file of a SQLite backend, the URL (password hidden) of a PostgreSQL one."""
        if self.kind == "sqlite":
            return f"SQLite file {self.path}"
        if self.kind == "postgresql":
            parsed = urllib.parse.urlsplit(self.url)
            if parsed.password is not None:
                netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)
                return f"PostgreSQL {urllib.parse.urlunsplit(parsed._replace(netloc=netloc))}"
            return f"PostgreSQL {self.url}"
        return "in-memory store"


def _sqlite_backend(path: str, text: str, must_exist: bool) -> Backend:
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        raise LocationError(f"{text!r} names no SQLite file: give a path such as ./rollouthub.db")
    absolute = os.path.abspath(os.path.expanduser(path))
    directory = os.path.dirname(absolute)
    if must_exist and not os.path.isfile(absolute):
        raise LocationError(f"no database at {absolute}")
    if not os.path.isdir(directory):
        raise LocationError(f"cannot use the SQLite file {absolute}: the directory {directory} does not exist")
    if os.path.isdir(absolute):
        raise LocationError(f"cannot use the SQLite file {absolute}: it is a directory")
    return Backend("sqlite", f"sqlite:///{absolute}", absolute)


def parse_backend(text: str, *, allow_memory: bool = True, must_exist: bool = False) -> Backend:
    """Parse a backend as users type it: ``memory``, a SQLite path or URL, or a PostgreSQL URL.

    Args:
        text: what the user gave.
        allow_memory: accept ``memory`` (a server can run on it; a file-based command cannot).
        must_exist: a SQLite file must already exist (commands that only read, such as ``export``, never create one).

    Raises:
        LocationError: the text names no usable backend (unknown scheme, SQLite file in a missing directory, ...).
    """
    text = text.strip()
    if not text:
        raise LocationError("the backend is empty: give a path, sqlite:///path.db, postgresql://... or memory")
    if text == "memory":
        if not allow_memory:
            raise LocationError("'memory' is not a database here: give a path, sqlite:///path.db or postgresql://...")
        return Backend("memory", "memory")
    scheme, sep, rest = text.partition("://")
    if not sep:
        return _sqlite_backend(text, text, must_exist)
    scheme = scheme.lower()
    if scheme in _SQLITE_SCHEMES:
        if not rest.startswith("/"):
            raise LocationError(f"{text!r} is not a SQLite URL: write sqlite:///relative/path.db or sqlite:////abs.db")
        path = urllib.parse.unquote(rest[1:].split("?", 1)[0])
        return _sqlite_backend(path, text, must_exist)
    if scheme in _POSTGRES_SCHEMES:
        parsed = urllib.parse.urlsplit(text)
        try:
            parsed.port  # noqa: B018 - validates the port
        except ValueError:
            raise LocationError(f"{text!r} has an invalid port") from None
        if not parsed.hostname and "host=" not in parsed.query:
            raise LocationError(f"{text!r} names no host: write postgresql://user@host:5432/database")
        return Backend("postgresql", text)
    raise LocationError(
        f"unsupported backend {scheme + '://'!r} in {text!r}: use a path, sqlite:///path.db, postgresql://... or memory"
    )


def sqlite_path(url: str) -> Optional[str]:
    """The absolute path of the SQLite file of ``url``, or ``None`` when it is not a SQLite file backend."""
    try:
        backend = parse_backend(url)
    except LocationError:
        return None
    return backend.path


def store_root_url(text: str) -> str:
    """The root URL of a store server from any form the user may type.

    ``http://127.0.0.1:4747``, ``http://127.0.0.1:4747/``, ``http://127.0.0.1:4747/v1/agl`` and ``127.0.0.1:4747``
    all give ``http://127.0.0.1:4747``; a path before ``/v1/agl`` (a reverse proxy's prefix) is kept.

    Raises:
        LocationError: not an http(s) URL with a host, or an invalid port.
    """
    original = text
    text = text.strip()
    if "://" not in text:
        text = "http://" + text
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https"):
        raise LocationError(f"store URL {original!r} is not http(s): write http://host:port")
    if not parsed.hostname:
        raise LocationError(f"store URL {original!r} names no host: write http://host:port")
    try:
        parsed.port  # noqa: B018 - validates the port
    except ValueError:
        raise LocationError(f"store URL {original!r} has an invalid port") from None
    if parsed.query or parsed.fragment:
        raise LocationError(f"store URL {original!r} has a query or fragment: write http://host:port")
    path = parsed.path.rstrip("/")
    if path.endswith(API_PREFIX):
        path = path[: -len(API_PREFIX)]
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))
