"""``LightningStoreClient``: the :class:`~rollouthub.store.base.LightningStore` contract over HTTP.

The client talks to a ``LightningStoreServer`` (or a reference Agent Lightning v0.3 server) through the REST routes
of ``/v1/agl``; sessions, retries and error mapping are its transport (:mod:`rollouthub.store.client.transport`).
Dequeue calls are never retried; ``dequeue_rollout_or_wait`` long-polls (requests of at most
:data:`DEQUEUE_WAIT_SLICE_SECONDS` that the server holds until a rollout is queued); against a server that answers at
once it sleeps instead, like the reference runner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, TypeVar, Union, cast
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)
from rollouthub.types.queries import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery
from rollouthub.types.updates import AttemptUpdate, RolloutUpdate

from ..base import (
    UNSET,
    LightningStore,
    LightningStoreCapabilities,
    LightningStoreStatistics,
    Unset,
    sleep_unless_abandoned,
)
from .transport import (
    API_TOKEN_ENV,
    HttpTransport,
    LightningStoreAuthError,
    LightningStoreEvictedError,
    LightningStoreHTTPError,
    LightningStoreRemoteValueError,
    _auth_error_from,
    logger,
)

if TYPE_CHECKING:
    pass

DEQUEUE_WAIT_SLICE_SECONDS = 1.0
"""Longest single long-poll request of ``dequeue_rollout_or_wait`` (a runner told to stop notices within it)."""

__all__ = [
    "API_TOKEN_ENV",
    "DEQUEUE_WAIT_SLICE_SECONDS",
    "LightningStoreAuthError",
    "LightningStoreClient",
    "LightningStoreEvictedError",
    "LightningStoreHTTPError",
    "LightningStoreRemoteValueError",
]

T = TypeVar("T")

WAIT_TIMEOUT_CAP = 0.1
"""Largest ``wait_for_rollouts(timeout=...)`` the client accepts."""

_WAIT_TIMEOUT_MESSAGE = "Timeout must be less than 0.1 seconds in LightningStoreClient to avoid blocking the event loop"

_MAX_CONCURRENT_SPAN_POSTS = 8
"""Upper bound of concurrent ``POST /spans`` requests issued by one ``add_many_spans`` call."""

_q = partial(quote, safe="")
"""Percent-encode one path segment (ids may contain ``/``, ``?`` ...)."""


# ---------------------------------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------------------------------
# Payload helpers
# ---------------------------------------------------------------------------------------------------------------------


def _dump_config(config: Any) -> Any:
    """JSON form of a rollout config (``RolloutConfig``, plain mapping or ``None``)."""
    if isinstance(config, BaseModel):
        return config.model_dump(mode="json")
    return to_jsonable_python(config) if config is not None else None


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data; plain JSON values are returned untouched (fast path)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return to_jsonable_python(value)


def _request_body(request: EnqueueRolloutRequest) -> Dict[str, Any]:
    """The wire form of a rollout request built by ``start_rollout``/``enqueue_rollout`` (taken as given: plain JSON
    data of its input, config and metadata)."""
    return {
        "input": _jsonable(request.input),
        "mode": request.mode,
        "resources_id": request.resources_id,
        "config": _dump_config(request.config),
        "metadata": _jsonable(request.metadata),
    }


def _query_body(query: BaseModel) -> Dict[str, Any]:
    """The wire form of a query object: its set filters (lists as lists), the page (``limit`` as the server takes
    it), and the order only when sorted (unsorted: the server's default order applies)."""
    body: Dict[str, Any] = {}
    for name in type(query).model_fields:  # as given: a query built by a store method is not validated
        value = getattr(query, name)
        if value is not None:
            body[name] = value if isinstance(value, (str, int, float)) else list(value)
    body["limit"] = _wire_limit(body["limit"])
    if body.get("sort_by") is None:
        body.pop("sort_order", None)
    return body


def _wire_limit(limit: int) -> int:
    """The ``limit`` to send: the HTTP API rejects ``0`` (a reference quirk), so ask for one item and drop it."""
    return 1 if limit == 0 else limit


def _page(data: Mapping[str, Any], parse: Any, limit: int) -> PaginatedResult[Any]:
    """A ``PaginatedResult`` from the server's JSON page, honouring a requested ``limit`` of ``0``."""
    if limit == 0:
        return PaginatedResult(items=[], limit=0, offset=data["offset"], total=data["total"])
    return PaginatedResult(
        items=[parse(item) for item in data["items"]],
        limit=data["limit"],
        offset=data["offset"],
        total=data["total"],
    )


def _parse_rollout(data: Mapping[str, Any]) -> Union[Rollout, AttemptedRollout]:
    """A rollout JSON object, in its attempted form when it carries an ``attempt``."""
    if data.get("attempt") is not None:
        return AttemptedRollout.model_validate(data)
    return Rollout.model_validate(data)


# ---------------------------------------------------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------------------------------


class LightningStoreClient(HttpTransport, LightningStore):
    """A :class:`LightningStore` backed by a remote store server reached over HTTP.

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

    def _init_runtime_state(self) -> None:
        """The transport's runtime state plus the dequeue URL and the dequeue log state."""
        super()._init_runtime_state()
        self._dequeue_url = self.server_address + "/queues/rollouts/dequeue"
        self._dequeue_was_successful = False
        self._dequeue_failure_warned = False

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """All capabilities are True: the server does the locking and the client is usable from any loop/thread."""
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        """The server's OTLP/HTTP traces endpoint, ``<root>/v1/traces``."""
        return self.server_address_root + "/v1/traces"

    async def _dequeue_batch(
        self, limit: int, worker_id: Optional[str], wait: Optional[float] = None
    ) -> Optional[List[AttemptedRollout]]:
        """Shared dequeue helper: one request, no retries; ``None`` when the request failed (callers
        treat it as "nothing available"). ``wait``: ask the server to hold the request up to that many seconds for
        a rollout (rollouthub extension)."""
        if limit <= 0:
            return []
        payload: Dict[str, Any] = {"limit": limit}
        if worker_id is not None:
            payload["worker_id"] = worker_id
        if wait:
            payload["timeout"] = wait
        try:
            session = await self._session()
            async with session.post(self._dequeue_url, json=payload) as response:
                response.raise_for_status()
                data = await response.json()
            result = [AttemptedRollout.model_validate(item) for item in data or ()]
        except aiohttp.ClientResponseError as exc:
            if exc.status == 401:
                raise _auth_error_from(exc) from exc
            self._log_dequeue_failure(exc)
            return None
        except Exception as exc:
            self._log_dequeue_failure(exc)
            return None
        self._dequeue_was_successful = True
        return result

    def _log_dequeue_failure(self, exc: BaseException) -> None:
        if self._dequeue_was_successful and not self._dequeue_failure_warned:
            self._dequeue_failure_warned = True
            logger.warning("Dequeue from %s failed (treated as an empty queue): %r", self.server_address, exc)
        else:
            logger.debug("Dequeue from %s failed (treated as an empty queue): %r", self.server_address, exc)

    # -- statistics ----------------------------------------------------------------------------------------------------

    async def statistics(self) -> LightningStoreStatistics:
        """The server store's statistics (``GET /statistics``)."""
        return cast(LightningStoreStatistics, await self._request_json("get", "/statistics"))

    # -- rollouts and the queue ----------------------------------------------------------------------------------------

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        """Create a rollout with its first attempt (``POST /rollouts``)."""
        data = await self._request_json("post", "/rollouts", json={**_request_body(request), "worker_id": worker_id})
        return AttemptedRollout.model_validate(data)

    async def _enqueue_rollout(self, request: EnqueueRolloutRequest) -> Rollout:
        """Enqueue one rollout (``POST /queues/rollouts/enqueue`` with a single-item list)."""
        data = await self._request_json("post", "/queues/rollouts/enqueue", json={"rollouts": [_request_body(request)]})
        if not data:
            raise RuntimeError("enqueue_rollout returned no rollouts")
        return Rollout.model_validate(data[0])

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> Sequence[Rollout]:
        """Enqueue several rollouts in one request (no request at all for an empty input)."""
        if not rollouts:
            return []
        items = [
            r.model_dump(mode="json")
            if isinstance(r, BaseModel)
            else EnqueueRolloutRequest.model_validate(r).model_dump(mode="json")
            for r in rollouts
        ]
        data = await self._request_json("post", "/queues/rollouts/enqueue", json={"rollouts": items})
        return [Rollout.model_validate(item) for item in data or ()]

    async def dequeue_rollout(self, worker_id: str | None = None) -> AttemptedRollout | None:
        """Claim the next queued rollout; ``None`` when empty or on any failure (never retried)."""
        result = await self._dequeue_batch(1, worker_id)
        return result[0] if result else None

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: str | None = None
    ) -> Sequence[AttemptedRollout]:
        """Claim up to ``limit`` queued rollouts; ``[]`` for ``limit <= 0`` (no request) or on any failure."""
        return await self._dequeue_batch(limit, worker_id) or []

    async def dequeue_rollout_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """Long-poll: dequeue requests that the server holds (at most :data:`DEQUEUE_WAIT_SLICE_SECONDS` each, so that
        ``abandoned`` is asked between them) until a rollout is claimed or ``timeout`` passes.

        A server that answers an empty queue at once (an Agent Lightning server ignores the ``timeout`` field) or a
        failed request makes the client sleep out the rest of ``timeout`` instead (cut short by ``abandoned``), like
        the reference runner's poll -- except while the server is down (not started yet, restarting): then the
        client probes its health on the ``health_retry_delays`` schedule and claims as soon as it answers. Failures
        are never raised (as for every dequeue: a failure reads as "nothing available").
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        while abandoned is None or not abandoned():
            wait = min(deadline - loop.time(), DEQUEUE_WAIT_SLICE_SECONDS)
            started = loop.time()
            result = await self._dequeue_batch(1, worker_id, wait=wait if wait > 0 else None)
            if result:
                return result[0]
            if loop.time() >= deadline:
                break
            if result is None and await self._wait_for_server_up(deadline, abandoned):
                continue  # the server was down and answers again: claim at once
            if result is None or loop.time() - started < wait / 2:  # not held by the server: poll like the reference
                await sleep_unless_abandoned(deadline - loop.time(), abandoned)
                break
        return None

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Create a new attempt (``POST /rollouts/{id}/attempts``)."""
        body = {"worker_id": worker_id} if worker_id is not None else None
        data = await self._request_json("post", f"/rollouts/{_q(rollout_id)}/attempts", json=body)
        return AttemptedRollout.model_validate(data)

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Query rollouts (``POST /rollouts/search``)."""
        body = _query_body(query)
        data = await self._request_json("post", "/rollouts/search", json=body)
        return _page(data, _parse_rollout, query.limit)

    async def get_rollout_by_id(self, rollout_id: str) -> Union[Rollout, AttemptedRollout, None]:
        """The rollout or ``None`` (also ``None`` when the request fails after retries, as a reference server
        answers 500 for unknown ids)."""
        return await self._lookup(
            f"/rollouts/{_q(rollout_id)}", _parse_rollout, f"get_rollout_by_id({rollout_id})", logging.DEBUG
        )

    async def _lookup(self, path: str, parse: Callable[[Any], T], what: str, level: int = logging.ERROR) -> T | None:
        """GET a single object: ``null`` or any failure after retries → ``None`` (logged); auth errors propagate."""
        try:
            data = await self._request_json("get", path)
        except LightningStoreAuthError:
            raise
        except Exception as exc:
            logger.log(level, "%s failed: %r", what, exc)
            return None
        return parse(data) if data else None

    async def _update_rollout(self, rollout_id: str, updates: RolloutUpdate) -> Rollout:
        """Update the provided fields (``POST /rollouts/{id}``); ``status=None``/``config=None`` → HTTP 400."""
        body: Dict[str, Any] = dict(updates)
        for key in ("input", "metadata"):
            if key in body:
                body[key] = _jsonable(body[key])
        if "config" in body:
            body["config"] = _dump_config(body["config"])
        data = await self._request_json("post", f"/rollouts/{_q(rollout_id)}", json=body)
        return Rollout.model_validate(data)

    # -- attempts ------------------------------------------------------------------------------------------------------

    async def _query_attempts(self, rollout_id: str, query: AttemptQuery) -> PaginatedResult[Attempt]:
        """Attempts of a rollout (``POST /rollouts/{id}/attempts/search``)."""
        body = _query_body(query)
        data = await self._request_json("post", f"/rollouts/{_q(rollout_id)}/attempts/search", json=body)
        return _page(data, Attempt.model_validate, query.limit)

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The latest attempt or ``None`` (also when the request fails after retries)."""
        return await self._lookup(
            f"/rollouts/{_q(rollout_id)}/attempts/latest", Attempt.model_validate, f"get_latest_attempt({rollout_id})"
        )

    async def _update_attempt(
        self, rollout_id: str, attempt_id: str | Literal["latest"], updates: AttemptUpdate
    ) -> Attempt:
        """Update the provided attempt fields (``POST /rollouts/{id}/attempts/{aid}``)."""
        body: Dict[str, Any] = dict(updates)
        if "metadata" in body:
            body["metadata"] = _jsonable(body["metadata"])
        data = await self._request_json("post", f"/rollouts/{_q(rollout_id)}/attempts/{_q(attempt_id)}", json=body)
        return Attempt.model_validate(data)

    # -- resources -----------------------------------------------------------------------------------------------------

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        """Query resource snapshots (``GET /resources``)."""
        params = {key: str(value) for key, value in _query_body(query).items()}
        data = await self._request_json("get", "/resources", params=params)
        return _page(data, ResourcesUpdate.model_validate, query.limit)

    @staticmethod
    def _dump_resources(resources: NamedResources) -> Dict[str, Any]:
        return {
            name: res.model_dump(mode="json") if isinstance(res, BaseModel) else to_jsonable_python(res)
            for name, res in resources.items()
        }

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Store a new snapshot (``POST /resources``)."""
        data = await self._request_json("post", "/resources", json=self._dump_resources(resources))
        return ResourcesUpdate.model_validate(data)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Upsert a snapshot by id (``POST /resources/{id}``)."""
        data = await self._request_json("post", f"/resources/{_q(resources_id)}", json=self._dump_resources(resources))
        return ResourcesUpdate.model_validate(data)

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        """One snapshot or ``None`` (also when the request fails after retries)."""
        return await self._lookup(
            f"/resources/{_q(resources_id)}", ResourcesUpdate.model_validate, f"get_resources_by_id({resources_id})"
        )

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """The latest snapshot or ``None`` (also when the request fails after retries)."""
        return await self._lookup("/resources/latest", ResourcesUpdate.model_validate, "get_latest_resources()")

    # -- spans ---------------------------------------------------------------------------------------------------------

    async def add_span(self, span: Span) -> Span | None:
        """Insert one span (``POST /spans``); ``None`` for a duplicate."""
        data = await self._request_json("post", "/spans", json=span.model_dump(mode="json"))
        return Span.model_validate(data) if data else None

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Insert spans with one ``add_span`` per span; returns the newly stored ones.

        Spans are processed group by group (same ``rollout_id`` and ``attempt_id``, in order of first appearance),
        like the in-process stores: an error in one group (e.g. unknown rollout) is raised before later groups are
        sent. Within a group up to 8 requests run concurrently; repeated span ids are sent after their first
        occurrence, so the first one wins and the repeats come back as duplicates.
        """
        if not spans:
            return []
        groups: Dict[Tuple[str, str], List[Span]] = {}
        for span in spans:
            groups.setdefault((span.rollout_id, span.attempt_id), []).append(span)
        stored: List[Span] = []
        for group in groups.values():
            if len(group) == 1:
                result = await self.add_span(group[0])
                if result is not None:
                    stored.append(result)
                continue
            stored.extend(await self._add_span_group(group))
        return stored

    async def _add_span_group(self, group: List[Span]) -> List[Span]:
        """Send the spans of one (rollout, attempt) group concurrently; results in input order."""
        semaphore = asyncio.Semaphore(_MAX_CONCURRENT_SPAN_POSTS)
        previous_by_span_id: Dict[str, asyncio.Task[Optional[Span]]] = {}

        async def send(span: Span, after: Optional[asyncio.Task[Optional[Span]]]) -> Optional[Span]:
            if after is not None:
                await asyncio.wait([after])
            async with semaphore:
                return await self.add_span(span)

        tasks: List[asyncio.Task[Optional[Span]]] = []
        for span in group:
            task = asyncio.ensure_future(send(span, previous_by_span_id.get(span.span_id)))
            previous_by_span_id[span.span_id] = task
            tasks.append(task)
        try:
            await asyncio.wait(tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        for task in tasks:  # surface the first failure in input order
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [result for result in (task.result() for task in tasks) if result is not None]

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Allocate the next span sequence id (``POST /spans/next``)."""
        data = await self._request_json(
            "post", "/spans/next", json={"rollout_id": rollout_id, "attempt_id": attempt_id}
        )
        return int(data["sequence_id"])

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[Tuple[str, str]]) -> Sequence[int]:
        """Allocate one id per pair, sequentially and in input order."""
        return [await self.get_next_span_sequence_id(rid, aid) for rid, aid in rollout_attempt_ids]

    async def _query_spans(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None, query: SpanQuery
    ) -> PaginatedResult[Span]:
        """Query the spans of a rollout (``POST /spans/search``)."""
        body = {"rollout_id": rollout_id, **_query_body(query)}
        if attempt_id is not None:
            body["attempt_id"] = attempt_id
        data = await self._request_json("post", "/spans/search", json=body)
        return _page(data, Span.model_validate, query.limit)

    # -- waiting -------------------------------------------------------------------------------------------------------

    async def wait_for_rollouts(self, *, rollout_ids: List[str], timeout: float | None = None) -> List[Rollout]:
        """Finished rollouts among ``rollout_ids`` after waiting up to ``timeout`` (at most 0.1 s) on the server.

        Raises:
            ValueError: ``timeout`` is larger than 0.1 s (the server blocks the HTTP request while waiting).
        """
        if timeout is not None and timeout > WAIT_TIMEOUT_CAP:
            raise ValueError(_WAIT_TIMEOUT_MESSAGE)
        if timeout is not None and timeout < 0:
            timeout = 0.0  # "check once", as in the in-process stores; servers may reject negative timeouts
        data = await self._request_json(
            "post", "/waits/rollouts", json={"rollout_ids": list(rollout_ids), "timeout": timeout}
        )
        return [Rollout.model_validate(item) for item in data or ()]

    # -- workers -------------------------------------------------------------------------------------------------------

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        """Query workers (``POST /workers/search``; ``limit``/``offset`` are forwarded, which the reference client did not do)."""
        body = _query_body(query)
        data = await self._request_json("post", "/workers/search", json=body)
        return _page(data, Worker.model_validate, query.limit)

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        """One worker or ``None`` (errors are raised)."""
        data = await self._request_json("get", f"/workers/{_q(worker_id)}")
        return Worker.model_validate(data) if data else None

    async def update_worker(self, worker_id: str, heartbeat_stats: Dict[str, Any] | Unset = UNSET) -> Worker:
        """Record a heartbeat (``POST /workers/{id}``); ``heartbeat_stats=None`` → HTTP 400."""
        body = None if heartbeat_stats is UNSET else {"heartbeat_stats": _jsonable(heartbeat_stats)}
        data = await self._request_json("post", f"/workers/{_q(worker_id)}", json=body)
        return Worker.model_validate(data)
