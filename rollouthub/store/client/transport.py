"""HTTP transport of ``LightningStoreClient``: sessions, the retry schedule with health probing, error mapping.

* one ``aiohttp.ClientSession`` per running event loop (tracer exporters flush on their own loops/threads, and a
  session bound to another loop can hang), closed with its loop, dropped in forked children;
* the retry schedule ``(0,) + retry_delays`` with health probing between attempts;
* both error shapes are understood: our server answers **400** ``{"detail", "error_type"}`` for invalid input and
  store ``ValueError``\\ s, a reference server answers **500** ``{"detail", "error_type", "traceback"}``. Errors
  surface as :class:`LightningStoreHTTPError` (an ``aiohttp.ClientResponseError`` carrying ``status``, the server's
  ``detail`` and ``error_type``); rejected input and remote ``ValueError``\\ s additionally derive from
  ``ValueError`` (:class:`LightningStoreRemoteValueError`); a 401 raises :class:`LightningStoreAuthError` and is
  never retried or swallowed; 410 (evicted spans) raises :class:`LightningStoreEvictedError`;
* optional bearer-token authentication (``api_token`` or the ``ROLLOUTHUB_API_TOKEN`` environment variable).

The API surface (the ``LightningStore`` methods) is :mod:`rollouthub.store.client.api`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json as _json
import logging
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import aiohttp

from ..base import SpansEvictedError, sleep_unless_abandoned

__all__ = [
    "API_TOKEN_ENV",
    "HttpTransport",
    "LightningStoreAuthError",
    "LightningStoreEvictedError",
    "LightningStoreHTTPError",
    "LightningStoreRemoteValueError",
]

logger = logging.getLogger("rollouthub.store.client")

API_TOKEN_ENV = "ROLLOUTHUB_API_TOKEN"
"""Environment variable holding the bearer token sent when ``api_token`` is not given."""

_RETRYABLE_NETWORK_ERRORS: Tuple[type[BaseException], ...] = (aiohttp.ClientConnectionError, asyncio.TimeoutError)
"""Network/session failures that are retried (server disconnected, connector and OS-level errors, timeouts)."""


# ---------------------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------------------


class LightningStoreHTTPError(aiohttp.ClientResponseError):
    """An error response of the store server.

    It is an ``aiohttp.ClientResponseError`` (``status`` is the HTTP status) enriched with what the server said:

    Attributes:
        detail: the server's ``detail`` message (for a reference server's generic 500, the exception message recovered
            from the reported traceback); for validation errors (422) a readable summary of the failing fields.
        error_type: the class name of the server-side exception (``"ValueError"``, ``"RequestValidationError"`` ...),
            when the server reported one.
        server_traceback: the formatted server-side traceback (reference servers only).
    """

    def __init__(
        self,
        request_info: Any,
        history: Tuple[Any, ...],
        *,
        status: int,
        detail: str,
        error_type: Optional[str] = None,
        server_traceback: Optional[str] = None,
        headers: Any = None,
    ) -> None:
        super().__init__(request_info, history, status=status, message=detail, headers=headers)
        self.detail = detail
        self.error_type = error_type
        self.server_traceback = server_traceback

    def __str__(self) -> str:
        kind = f" {self.error_type}" if self.error_type else ""
        url = getattr(self.request_info, "real_url", None)
        where = f" ({url})" if url is not None else ""
        return f"{self.status}{kind}: {self.detail}{where}"

    def __reduce__(self) -> Any:  # ClientResponseError does not round-trip through pickle by default.
        return (
            _rebuild_http_error,
            (type(self), self.status, self.detail, self.error_type, self.server_traceback),
        )


class LightningStoreRemoteValueError(LightningStoreHTTPError, ValueError):
    """The server rejected the input (400/422) or the store raised a ``ValueError`` (e.g. an unknown rollout id)."""


class LightningStoreAuthError(LightningStoreHTTPError, PermissionError):
    """The server answered 401: the bearer token is missing or wrong. Never retried, never swallowed."""


class LightningStoreEvictedError(LightningStoreHTTPError, SpansEvictedError):
    """The server answered 410 Gone: the spans of the rollout were evicted by an in-memory store to stay within its
    memory bound. A :class:`~rollouthub.store.base.SpansEvictedError` (a ``RuntimeError``) like the in-process store's
    error, with the same message; never retried."""

    @property
    def rollout_id(self) -> Optional[str]:  # type: ignore[override]
        """The rollout whose spans are gone (parsed from the server's message)."""
        prefix, suffix = "Spans for rollout ", " have been evicted"
        detail = self.detail
        if detail.startswith(prefix) and detail.endswith(suffix):
            return detail[len(prefix) : -len(suffix)]
        return None


def _rebuild_http_error(
    cls: type[LightningStoreHTTPError],
    status: int,
    detail: str,
    error_type: Optional[str],
    server_traceback: Optional[str],
) -> LightningStoreHTTPError:
    return cls(None, (), status=status, detail=detail, error_type=error_type, server_traceback=server_traceback)


def _summarize_validation_detail(detail: Sequence[Any]) -> str:
    """Turn FastAPI's 422 ``detail`` list into ``"body.status: Input should be ...; ..."``."""
    parts: List[str] = []
    for entry in detail:
        if isinstance(entry, Mapping):
            loc = ".".join(str(x) for x in entry.get("loc", ()) or ())
            msg = str(entry.get("msg", entry))
            parts.append(f"{loc}: {msg}" if loc else msg)
        else:
            parts.append(str(entry))
    return "; ".join(parts) or "validation error"


def _message_from_traceback(error_type: Optional[str], formatted: str) -> Optional[str]:
    """Recover ``"<message>"`` from the last ``"<ErrorType>: <message>"`` line of a formatted traceback."""
    for line in reversed(formatted.strip().splitlines()):
        line = line.strip()
        if not line:
            continue
        head, sep, rest = line.partition(": ")
        if sep and (error_type is None or head.rsplit(".", 1)[-1] == error_type):
            return rest
        return None
    return None


def _make_http_error(response: aiohttp.ClientResponse, body: bytes) -> LightningStoreHTTPError:
    """Build the exception describing an error response (any status >= 400) from its body."""
    status = response.status
    detail: str = response.reason or f"HTTP {status}"
    error_type: Optional[str] = None
    server_traceback: Optional[str] = None
    payload: Any = None
    if body:
        try:
            payload = _json.loads(body)
        except ValueError:
            text = body.decode("utf-8", errors="replace").strip()
            if text:
                detail = text[:2000]
    if isinstance(payload, Mapping):
        raw_detail = payload.get("detail")
        error_type = payload.get("error_type") if isinstance(payload.get("error_type"), str) else None
        tb = payload.get("traceback")
        server_traceback = tb if isinstance(tb, str) else None
        if isinstance(raw_detail, str):
            detail = raw_detail
        elif isinstance(raw_detail, list):
            detail = _summarize_validation_detail(raw_detail)
            error_type = error_type or "RequestValidationError"
        elif raw_detail is not None:
            detail = str(raw_detail)
        if server_traceback and detail == "Internal server error":
            detail = _message_from_traceback(error_type, server_traceback) or detail
    if status == 401:
        cls: type[LightningStoreHTTPError] = LightningStoreAuthError
        if detail in ("Unauthorized", f"HTTP {status}"):
            detail = f"Unauthorized: the store server requires a valid bearer token (api_token / {API_TOKEN_ENV})"
    elif status in (400, 422) or error_type == "ValueError":
        cls = LightningStoreRemoteValueError
    elif status == 410:
        cls = LightningStoreEvictedError
    else:
        cls = LightningStoreHTTPError
    return cls(
        response.request_info,
        response.history,
        status=status,
        detail=detail,
        error_type=error_type,
        server_traceback=server_traceback,
        headers=response.headers,
    )


def _repeat_last(delays: Sequence[float]) -> Iterator[float]:
    """``delays`` in order, then its last value forever."""
    yield from delays
    yield from itertools.repeat(delays[-1])


def _auth_error_from(exc: aiohttp.ClientResponseError) -> LightningStoreAuthError:
    """Upgrade a bare 401 ``ClientResponseError`` (from ``raise_for_status``) to :class:`LightningStoreAuthError`."""
    return LightningStoreAuthError(
        exc.request_info,
        exc.history,
        status=exc.status,
        detail=f"Unauthorized: the store server requires a valid bearer token (api_token / {API_TOKEN_ENV})",
        headers=exc.headers,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------------------------------------------------


async def _close_at_loop_shutdown(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """An async generator whose ``finally`` closes ``session``.

    Once started, the generator is registered with its event loop (asyncgen hooks); ``asyncio.run`` finalizes every
    registered generator (``loop.shutdown_asyncgens()``) before closing the loop, so a session created in a short-lived
    loop (a tracer thread, ``asyncio.run`` in a worker thread) is closed on its own loop without an explicit ``close()``.
    """
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


class _SessionEntry:
    """A cached session, the loop it belongs to and the generator that closes it when that loop shuts down.

    The guard generator is started by :meth:`arm` (awaited on the session's loop): its first step registers it with
    that loop through the asyncgen "firstiter" hook, so the loop's shutdown (``asyncio.run``) finalizes it.
    """

    __slots__ = ("loop", "session", "_guard", "_armed")

    def __init__(self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
        self.loop = loop
        self.session = session
        self._guard: Optional[AsyncGenerator[None, None]] = _close_at_loop_shutdown(session)
        self._armed = False

    async def arm(self) -> None:
        """Start the guard generator (once), so that the loop's shutdown closes the session."""
        guard = self._guard
        if self._armed or guard is None:
            return
        self._armed = True
        await anext(guard)  # runs up to the generator's ``yield``: nothing is awaited before it

    async def aclose(self) -> None:
        """Close the session (and finish the guard generator, so it is not finalized again later)."""
        guard, self._guard = self._guard, None
        armed, self._armed = self._armed, False
        if guard is not None:
            await guard.aclose()  # runs the guard's ``finally`` (closing the session) only when it was started
        if not armed and not self.session.closed:
            await self.session.close()


_LIVE_CLIENTS: weakref.WeakSet[HttpTransport] = weakref.WeakSet()
"""Every client of this process, so that a forked child can drop the sessions it inherited."""


def _forget_sessions_after_fork() -> None:
    """In a forked child, drop inherited sessions (their sockets belong to the parent) and reset the locks."""
    for client in list(_LIVE_CLIENTS):
        client._lock = threading.Lock()
        client._sessions = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_sessions_after_fork)


# ---------------------------------------------------------------------------------------------------------------------
# The transport
# ---------------------------------------------------------------------------------------------------------------------


class HttpTransport:
    """Sessions and the request/retry machinery of a store client (the base of ``LightningStoreClient``).

    Args:
        server_address: root URL of the server, e.g. ``"http://127.0.0.1:4747"`` (a trailing ``/`` is ignored).
        retry_delays: delays (seconds) before the 2nd, 3rd, ... attempt of a request; the schedule is
            ``(0,) + retry_delays``. ``()`` means a single attempt.
        health_retry_delays: delays between health probes after a failed attempt; ``()`` disables probing.
        request_timeout: total and socket-read timeout of one request.
        connection_timeout: connect timeout of one request.
        api_token: bearer token sent as ``Authorization: Bearer <token>``; defaults to the ``ROLLOUTHUB_API_TOKEN``
            environment variable (unset or empty → no header).
    """

    def __init__(
        self,
        server_address: str,
        *,
        retry_delays: Sequence[float] = (1.0, 2.0, 5.0),
        health_retry_delays: Sequence[float] = (0.1, 0.2, 0.5),
        request_timeout: float = 30.0,
        connection_timeout: float = 5.0,
        api_token: Optional[str] = None,
    ) -> None:
        self.server_address_root = server_address.rstrip("/")
        self.server_address = self.server_address_root + "/v1/agl"
        self.retry_delays: Tuple[float, ...] = tuple(float(d) for d in retry_delays)
        self.health_retry_delays: Tuple[float, ...] = tuple(float(d) for d in health_retry_delays)
        self.request_timeout = float(request_timeout)
        self.connection_timeout = float(connection_timeout)
        if api_token is None:
            api_token = os.environ.get(API_TOKEN_ENV) or None
        self.api_token: Optional[str] = api_token
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        """(Re)create everything that is not pickled: sessions, lock, derived constants."""
        self._lock = threading.Lock()
        self._sessions: Dict[int, _SessionEntry] = {}
        self._attempt_schedule: Tuple[float, ...] = (0.0,) + self.retry_delays
        self._health_url = self.server_address + "/health"
        self._timeout = aiohttp.ClientTimeout(
            total=self.request_timeout,
            connect=self.connection_timeout,
            sock_connect=self.connection_timeout,
            sock_read=self.request_timeout,
        )
        probe_timeout = min(self.connection_timeout, self.request_timeout)
        self._health_timeout = aiohttp.ClientTimeout(total=probe_timeout)
        self._headers: Dict[str, str] = {"Authorization": f"Bearer {self.api_token}"} if self.api_token else {}
        self._outage_logged = False
        _LIVE_CLIENTS.add(self)

    # -- identity, pickling, lifecycle ---------------------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        """Pickle only the addresses, delays, timeouts and token; sessions are recreated lazily."""
        return {
            "server_address_root": self.server_address_root,
            "server_address": self.server_address,
            "retry_delays": self.retry_delays,
            "health_retry_delays": self.health_retry_delays,
            "request_timeout": self.request_timeout,
            "connection_timeout": self.connection_timeout,
            "api_token": self.api_token,
        }

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """Restore the pickled configuration and fresh runtime state."""
        self.__dict__.update(state)
        self.__dict__.setdefault("api_token", None)
        self._init_runtime_state()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.server_address_root!r})"

    async def close(self) -> None:
        """Close every cached session (best effort: sessions of loops that are no longer running are dropped)."""
        with self._lock:
            entries = list(self._sessions.values())
            self._sessions.clear()
        try:
            current: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for entry in entries:
            try:
                if entry.loop is current:
                    await entry.aclose()
                elif not entry.loop.is_closed() and entry.loop.is_running():
                    asyncio.run_coroutine_threadsafe(entry.aclose(), entry.loop)
                elif not entry.session.closed:
                    entry.session.detach()
            except Exception:  # pragma: no cover - best effort
                logger.debug("Failed to close a LightningStoreClient session", exc_info=True)

    # -- sessions ------------------------------------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        """The session of the running event loop, created on first use (or when the cached one was closed)."""
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(id(loop))
        if entry is not None and entry.loop is loop and not entry.session.closed:
            return entry.session
        with self._lock:
            entry = self._sessions.get(id(loop))
            if entry is not None and entry.loop is loop and not entry.session.closed:
                return entry.session
            for key, other in list(self._sessions.items()):
                if other.loop.is_closed() or other.session.closed:
                    del self._sessions[key]
                    if not other.session.closed:  # its loop is gone: it can never be closed properly
                        other.session.detach()
            session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
            self._sessions[id(loop)] = _SessionEntry(loop, session)
            return session

    async def _session(self) -> aiohttp.ClientSession:
        """``_get_session()``, also accepting an awaitable result (tests may patch it with an async function); arms the
        session's close-at-loop-shutdown guard on first use."""
        session: Any = self._get_session()
        if inspect.isawaitable(session):
            session = await session
        entry = self._sessions.get(id(asyncio.get_running_loop()))
        if entry is not None and entry.session is session:
            await entry.arm()
        return cast(aiohttp.ClientSession, session)

    # -- request machinery ---------------------------------------------------------------------------------------------

    async def _send_once(self, session: aiohttp.ClientSession, method: str, url: str, json: Any, params: Any) -> Any:
        """One HTTP exchange: JSON result on 2xx, :class:`LightningStoreHTTPError` otherwise."""
        if method == "get":
            context = session.get(url, params=params)
        elif method == "post":
            context = session.post(url, json=json, params=params)
        else:
            raise ValueError(f"Unsupported HTTP method: {method!r}")
        async with context as response:
            if response.status >= 400:
                body = await response.read()
                raise _make_http_error(response, body)
            body = await response.read()
        return _json.loads(body) if body else None

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Any = None,
    ) -> Any:
        """Send a request to ``server_address + path`` with the retry algorithm of the reference client.

        Attempts follow ``(0,) + retry_delays``. 4xx responses (except 408) are raised at once; 408/5xx responses and
        network errors are retried after a successful health probe (an unhealthy server stops the retries). The
        last error is raised when the schedule is exhausted.
        """
        method = method.lower()
        url = self.server_address + path
        last_error: Optional[BaseException] = None
        for delay in self._attempt_schedule:
            if delay > 0:
                await asyncio.sleep(delay)
            session = await self._session()
            try:
                return await self._send_once(session, method, url, json, params)
            except aiohttp.ClientResponseError as exc:
                if 400 <= exc.status < 500 and exc.status != 408:
                    if exc.status == 401 and not isinstance(exc, LightningStoreAuthError):
                        raise _auth_error_from(exc) from exc
                    raise
                last_error = exc
                logger.debug("%s %s failed with HTTP %s; will retry if healthy", method.upper(), path, exc.status)
            except _RETRYABLE_NETWORK_ERRORS as exc:
                last_error = exc
                logger.debug("%s %s failed: %r; will retry if healthy", method.upper(), path, exc)
            if not await self._wait_until_healthy(session):
                logger.debug("Store server at %s is not healthy; giving up on %s", self.server_address_root, path)
                break
        assert last_error is not None
        raise last_error

    async def _wait_until_healthy(self, session: aiohttp.ClientSession) -> bool:
        """Probe ``GET <server_address>/health`` up to ``len(health_retry_delays) + 1`` times; True on a 200."""
        delays = self.health_retry_delays
        if not delays:
            return True
        for index in range(len(delays) + 1):
            if await self._probe_health(session):
                return True
            if index < len(delays):
                await asyncio.sleep(delays[index])
        return False

    async def _probe_health(self, session: aiohttp.ClientSession) -> bool:
        """One ``GET <server_address>/health``; True on a 200 (failures are swallowed)."""
        try:
            async with session.get(self._health_url, timeout=self._health_timeout) as response:
                return response.status == 200
        except Exception:
            logger.debug("Health probe of %s failed", self._health_url, exc_info=True)
            return False

    async def _wait_for_server_up(self, deadline: float, abandoned: Optional[Callable[[], bool]]) -> bool:
        """After a failed dequeue: True when the server was down and answers its health check again before
        ``deadline`` (event-loop time), probing on the ``health_retry_delays`` schedule (its last delay repeated).

        False at once when the server is up (the failure was not an outage: the caller backs off) or probing is
        disabled; False when ``deadline`` passes or ``abandoned()`` turns true while it is down.
        """
        delays = self.health_retry_delays
        if not delays:
            return False
        session = await self._session()
        if await self._probe_health(session):
            return False
        if not self._outage_logged:
            self._outage_logged = True
            logger.info("Store server at %s is not reachable yet; retrying.", self.server_address_root)
        loop = asyncio.get_running_loop()
        for delay in _repeat_last(delays):
            if loop.time() + delay > deadline or await sleep_unless_abandoned(delay, abandoned):
                return False
            if await self._probe_health(session):
                self._outage_logged = False
                logger.info("Store server at %s is reachable.", self.server_address_root)
                return True
        return False  # pragma: no cover - _repeat_last never ends
