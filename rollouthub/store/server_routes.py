"""REST routes of the store server under ``/v1/agl`` (store.md 11.5-11.6).

Handlers call the server's delegating methods (``server.<method>``), which call ``server.store.<method>`` at request
time. Responses are serialized directly with ``pydantic_core.to_json`` (each item by its own model, so attempted
rollouts keep their ``attempt``), which avoids FastAPI's second validation pass of response models; the declared
``response_model`` only documents the shape in the OpenAPI document.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Sequence, Type, Union

import pydantic_core
from fastapi import APIRouter, Body, HTTPException, Query
from fastapi.responses import Response
from pydantic import BaseModel, TypeAdapter

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutStatus,
    Span,
    Worker,
    WorkerStatus,
)

from .base import UNSET, paginated_json
from .client_server import (
    MAX_DEQUEUE_WAIT_SECONDS,
    DequeueManyRolloutsRequest,
    EnqueueManyRolloutsRequest,
    NextSequenceIdRequest,
    NextSequenceIdResponse,
    QueryAttemptsRequest,
    QueryRolloutsRequest,
    QuerySpansRequest,
    QueryWorkersRequest,
    RolloutRequest,
    StartAttemptRequest,
    UpdateAttemptRequest,
    UpdateRolloutRequest,
    UpdateWorkerRequest,
    WaitForRolloutsRequest,
)
from .collection.base import model_field_names
from .domains import MAX_OFFSET, MAX_PAGE_SIZE, check_text, check_value

if TYPE_CHECKING:
    from .client_server import LightningStoreServer

__all__ = [
    "build_router",
    "check_params",
    "validate_pagination",
    "NAMED_RESOURCES",
    "dump_json",
    "op_add_resources",
    "op_add_span",
    "op_dequeue",
    "op_enqueue",
    "op_get_latest_resources",
    "op_get_next_span_sequence_id",
    "op_get_resources_by_id",
    "op_get_rollout_by_id",
    "op_query_attempts",
    "op_query_spans",
    "op_search_rollouts",
    "op_start_rollout",
    "op_update_attempt",
    "op_update_resources",
    "op_update_worker",
    "op_wait_for_rollouts",
]

logger = logging.getLogger("rollouthub.store.server")

_JSON = "application/json"
_PLAIN_ROLLOUTS = TypeAdapter(List[Rollout])
_dump_plain_rollouts = _PLAIN_ROLLOUTS.dump_json
_INF = float("inf")

NAMED_RESOURCES: TypeAdapter[NamedResources] = TypeAdapter(NamedResources)
"""Validator of the ``NamedResources`` body of ``POST /resources`` and ``POST /resources/{id}``."""

dump_json = pydantic_core.to_json
"""Serialize a response payload to JSON bytes (models by their own runtime type: attempted rollouts keep ``attempt``)."""
_dump = dump_json


def _json(payload: Any, status_code: int = 200) -> Response:
    return Response(content=_dump(payload), status_code=status_code, media_type=_JSON)


def _paginated(result: Any) -> Response:
    return _raw(paginated_json(result))


def validate_pagination(
    model: Type[BaseModel],
    *,
    sort_by: Optional[str],
    sort_order: str,
    limit: int,
    offset: int,
    filter_logic: Optional[str] = None,
) -> None:
    """Apply store.md 11.5 in order, raising ``HTTPException(400)`` on the first violation (plus the page-size and
    offset bounds of :mod:`rollouthub.store.domains`)."""
    if sort_by is not None and sort_by not in model_field_names(model):
        allowed = ", ".join(model.model_fields)
        raise HTTPException(400, f"Invalid sort_by: {sort_by}, allowed fields are: {allowed}")
    if sort_order not in ("asc", "desc"):
        raise HTTPException(400, f"Invalid sort_order: {sort_order}, must be 'asc' or 'desc'")
    if limit == 0 or limit < -1:
        raise HTTPException(400, "Limit must be greater than 0 or -1 for no limit")
    if limit > MAX_PAGE_SIZE:
        raise HTTPException(400, f"limit must be at most {MAX_PAGE_SIZE} (or -1 for no limit); got {limit}")
    if offset < 0:
        raise HTTPException(400, "Offset must be greater than or equal to 0")
    if offset > MAX_OFFSET:
        raise HTTPException(400, f"offset must be at most {MAX_OFFSET}; got {offset}")
    if filter_logic is not None and filter_logic not in ("and", "or"):
        raise HTTPException(400, f"Invalid filter_logic: {filter_logic}, must be 'and' or 'or'")


def check_params(**params: Any) -> None:
    """Apply the text domain (:func:`~rollouthub.store.domains.check_text`) to path and query parameters: a string, a
    list of strings or ``None`` each; :class:`~rollouthub.store.domains.InputDomainError` names the parameter."""
    for name, value in params.items():
        if isinstance(value, str):
            check_text(value, name)
        elif value is not None:
            for item in value:
                check_text(item, name)


def _reject_nulls(request: BaseModel, fields: Sequence[str]) -> None:
    for field in fields:
        if field in request.model_fields_set and getattr(request, field) is None:
            raise HTTPException(400, f"{field} is invalid; it cannot be a null value.")


def _provided(request: BaseModel, field: str) -> Any:
    return getattr(request, field) if field in request.model_fields_set else UNSET


# ---------------------------------------------------------------------------------------------------------------------
# Operations shared by the FastAPI routes and the front door (server_fastpath.FrontDoor): each returns the JSON body
# of the success response and raises ``HTTPException`` (4xx) or the store's own exception.
# ---------------------------------------------------------------------------------------------------------------------


async def op_dequeue(
    server: LightningStoreServer,
    request: Optional[DequeueManyRolloutsRequest],
    client_gone: Optional[Callable[[], bool]] = None,
) -> bytes:
    """``POST /queues/rollouts/dequeue``: ``limit <= 0`` → ``[]``; 1 → ``dequeue_rollout`` (``dequeue_rollout_or_wait``
    with a ``timeout``, which stops waiting -- and never claims -- once ``client_gone()``); else ``dequeue_many``."""
    if request is None:
        limit, worker_id, timeout = 1, None, None
    else:
        limit, worker_id, timeout = request.limit, request.worker_id, request.timeout
    if timeout and limit != 1:
        raise HTTPException(400, "timeout is only supported with limit 1")
    if limit > MAX_PAGE_SIZE:
        raise HTTPException(400, f"limit must be at most {MAX_PAGE_SIZE}; got {limit}")
    if limit <= 0:
        return b"[]"
    if limit == 1:
        if timeout:
            attempted = await server.dequeue_rollout_for_client(
                worker_id, min(timeout, MAX_DEQUEUE_WAIT_SECONDS), client_gone
            )
        else:
            attempted = await server.dequeue_rollout(worker_id=worker_id)
        return _dump([attempted]) if attempted is not None else b"[]"
    return _dump(list(await server.dequeue_many_rollouts(limit=limit, worker_id=worker_id)))


async def op_enqueue(server: LightningStoreServer, request: EnqueueManyRolloutsRequest) -> bytes:
    """``POST /queues/rollouts/enqueue`` (answered with 201): one item → ``enqueue_rollout``, else ``enqueue_many``."""
    items = request.rollouts
    if not items:
        return b"[]"
    if len(items) == 1:
        item = items[0]
        rollout = await server.enqueue_rollout(
            input=item.input,
            mode=item.mode,
            resources_id=item.resources_id,
            config=item.config,
            metadata=item.metadata,
        )
        return _dump([rollout])
    return _dump(list(await server.enqueue_many_rollouts(items)))


async def op_start_rollout(server: LightningStoreServer, request: RolloutRequest) -> bytes:
    """``POST /rollouts`` (answered with 201)."""
    attempted = await server.start_rollout(
        input=request.input,
        mode=request.mode,
        resources_id=request.resources_id,
        config=request.config,
        metadata=request.metadata,
        worker_id=request.worker_id,
    )
    return _dump(attempted)


async def op_get_rollout_by_id(server: LightningStoreServer, rollout_id: str) -> bytes:
    """``GET /rollouts/{rollout_id}``: the rollout (with its latest attempt when it has one) or ``null``."""
    check_text(rollout_id, "rollout_id")
    return _dump(await server.get_rollout_by_id(rollout_id))


async def op_search_rollouts(server: LightningStoreServer, request: QueryRolloutsRequest) -> bytes:
    """``POST /rollouts/search``: validate pagination (11.5); ``status_in``/``rollout_id_in`` apply only when present."""
    validate_pagination(
        Rollout,
        sort_by=request.sort_by,
        sort_order=request.sort_order,
        limit=request.limit,
        offset=request.offset,
        filter_logic=request.filter_logic,
    )
    fields = request.model_fields_set
    result = await server.query_rollouts(
        status_in=request.status_in if "status_in" in fields else None,
        rollout_id_in=request.rollout_id_in if "rollout_id_in" in fields else None,
        rollout_id_contains=request.rollout_id_contains,
        filter_logic=request.filter_logic,
        sort_by=request.sort_by,
        sort_order=request.sort_order,
        limit=request.limit,
        offset=request.offset,
    )
    return paginated_json(result)


async def op_query_attempts(server: LightningStoreServer, rollout_id: str, request: QueryAttemptsRequest) -> bytes:
    """``GET /rollouts/{rollout_id}/attempts`` and ``POST …/attempts/search``: pagination check, ``query_attempts``."""
    check_text(rollout_id, "rollout_id")
    validate_pagination(
        Attempt, sort_by=request.sort_by, sort_order=request.sort_order, limit=request.limit, offset=request.offset
    )
    result = await server.query_attempts(
        rollout_id,
        sort_by=request.sort_by,
        sort_order=request.sort_order,
        limit=request.limit,
        offset=request.offset,
    )
    return paginated_json(result)


async def op_update_attempt(
    server: LightningStoreServer, rollout_id: str, attempt_id: str, request: UpdateAttemptRequest
) -> bytes:
    """``POST /rollouts/{rollout_id}/attempts/{attempt_id}`` with presence semantics (explicit nulls → 400)."""
    check_params(rollout_id=rollout_id, attempt_id=attempt_id)
    fields = request.model_fields_set
    if fields:
        _reject_nulls(request, ("status", "worker_id", "last_heartbeat_time", "metadata"))
    status: Any = request.status if "status" in fields else UNSET
    worker_id: Any = request.worker_id if "worker_id" in fields else UNSET
    heartbeat: Any = request.last_heartbeat_time if "last_heartbeat_time" in fields else UNSET
    metadata: Any = request.metadata if "metadata" in fields else UNSET
    attempt = await server.update_attempt(
        rollout_id, attempt_id, status=status, worker_id=worker_id, last_heartbeat_time=heartbeat, metadata=metadata
    )
    return _dump(attempt)


async def op_update_worker(
    server: LightningStoreServer, worker_id: str, request: Optional[UpdateWorkerRequest]
) -> bytes:
    """``POST /workers/{worker_id}``: absent body/field → heartbeat only; ``heartbeat_stats: null`` → 400."""
    check_text(worker_id, "worker_id")
    stats: Any = UNSET
    if request is not None and "heartbeat_stats" in request.model_fields_set:
        if request.heartbeat_stats is None:
            raise HTTPException(400, "heartbeat_stats is invalid; it cannot be a null value.")
        stats = request.heartbeat_stats
    return _dump(await server.update_worker(worker_id, heartbeat_stats=stats))


async def op_add_resources(server: LightningStoreServer, resources: NamedResources) -> bytes:
    """``POST /resources`` (answered with 201): store a new snapshot."""
    check_value(resources)
    return _dump(await server.add_resources(resources))


async def op_update_resources(server: LightningStoreServer, resources_id: str, resources: NamedResources) -> bytes:
    """``POST /resources/{resources_id}``: create or update the snapshot with this id."""
    check_text(resources_id, "resources_id")
    check_value(resources)
    return _dump(await server.update_resources(resources_id, resources))


async def op_get_latest_resources(server: LightningStoreServer) -> bytes:
    """``GET /resources/latest``: the latest snapshot or ``null``."""
    return _dump(await server.get_latest_resources())


async def op_get_resources_by_id(server: LightningStoreServer, resources_id: str) -> bytes:
    """``GET /resources/{resources_id}``: the snapshot or ``null``."""
    check_text(resources_id, "resources_id")
    return _dump(await server.get_resources_by_id(resources_id))


async def op_add_span(server: LightningStoreServer, span: Span) -> bytes:
    """``POST /spans`` (answered with 201; ``null`` for a duplicate)."""
    check_value(span)
    stored = await server.add_span(span)
    return _dump(stored) if stored is not None else b"null"


async def op_query_spans(server: LightningStoreServer, request: QuerySpansRequest) -> bytes:
    """``GET /spans`` and ``POST /spans/search``: validate pagination (11.5), then ``query_spans``."""
    validate_pagination(
        Span,
        sort_by=request.sort_by,
        sort_order=request.sort_order,
        limit=request.limit,
        offset=request.offset,
        filter_logic=request.filter_logic,
    )
    return await server.query_spans_json(
        request.rollout_id,
        request.attempt_id,
        trace_id=request.trace_id,
        trace_id_contains=request.trace_id_contains,
        span_id=request.span_id,
        span_id_contains=request.span_id_contains,
        parent_id=request.parent_id,
        parent_id_contains=request.parent_id_contains,
        name=request.name,
        name_contains=request.name_contains,
        filter_logic=request.filter_logic,
        limit=request.limit,
        offset=request.offset,
        sort_by=request.sort_by,
        sort_order=request.sort_order,
    )


async def op_get_next_span_sequence_id(server: LightningStoreServer, request: NextSequenceIdRequest) -> bytes:
    """``POST /spans/next``: allocate the next span sequence id of a rollout attempt."""
    sequence_id = await server.get_next_span_sequence_id(request.rollout_id, request.attempt_id)
    return _dump({"sequence_id": int(sequence_id)})


async def op_wait_for_rollouts(server: LightningStoreServer, request: WaitForRolloutsRequest) -> bytes:
    """``POST /waits/rollouts``: wait up to ``timeout`` seconds; the finished rollouts, without their attempts."""
    timeout = request.timeout
    if timeout is not None and not (0 <= timeout < _INF):
        raise HTTPException(400, "timeout must be a finite, non-negative number of seconds (or null)")
    rollouts = await server.wait_for_rollouts(rollout_ids=request.rollout_ids, timeout=timeout)
    plain = [r if type(r) is Rollout else Rollout.model_validate(r.model_dump(exclude={"attempt"})) for r in rollouts]
    return _dump_plain_rollouts(plain)


def _raw(body: bytes, status_code: int = 200) -> Response:
    return Response(content=body, status_code=status_code, media_type=_JSON)


def build_router(server: LightningStoreServer, prefix: str = "") -> APIRouter:
    """Build the REST router bound to ``server`` (routes under ``prefix``, normally ``/v1/agl``)."""
    router = APIRouter(prefix=prefix)

    @router.get("/health")
    async def health() -> Dict[str, str]:
        """Liveness probe; never requires authentication."""
        return {"status": "ok"}

    # -- queue ---------------------------------------------------------------------------------------------------------
    @router.post("/queues/rollouts/enqueue", status_code=201, response_model=List[Rollout])
    async def enqueue_rollouts(request: EnqueueManyRolloutsRequest) -> Response:
        """Enqueue one or more rollouts (store.md 11.6); 201 with the rollouts in input order."""
        return _raw(await op_enqueue(server, request), 201)

    @router.post("/queues/rollouts/dequeue", response_model=List[AttemptedRollout])
    async def dequeue_rollouts(request: Optional[DequeueManyRolloutsRequest] = None) -> Response:
        """Claim up to ``limit`` queued rollouts (default 1) for ``worker_id``."""
        return _raw(await op_dequeue(server, request))

    # -- rollouts ------------------------------------------------------------------------------------------------------
    @router.post("/rollouts", status_code=201, response_model=AttemptedRollout)
    async def start_rollout(request: RolloutRequest) -> Response:
        """Create a rollout with its first attempt, bypassing the queue; 201."""
        return _raw(await op_start_rollout(server, request), 201)

    @router.get("/rollouts", response_model=PaginatedResult[Union[AttemptedRollout, Rollout]])
    async def query_rollouts(
        status_in: Optional[List[RolloutStatus]] = Query(None),
        rollout_id_in: Optional[List[str]] = Query(None),
        rollout_id_contains: Optional[str] = None,
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        filter_logic: Literal["and", "or"] = "and",
    ) -> Response:
        """Query rollouts with filters, sorting and pagination (query parameters)."""
        check_params(rollout_id_in=rollout_id_in, rollout_id_contains=rollout_id_contains)
        validate_pagination(
            Rollout, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset, filter_logic=filter_logic
        )
        result = await server.query_rollouts(
            status_in=status_in,
            rollout_id_in=rollout_id_in,
            rollout_id_contains=rollout_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return _paginated(result)

    @router.post("/rollouts/search", response_model=PaginatedResult[Union[AttemptedRollout, Rollout]])
    async def search_rollouts(request: QueryRolloutsRequest) -> Response:
        """Query rollouts (JSON body); ``status_in``/``rollout_id_in`` apply only when present."""
        return _raw(await op_search_rollouts(server, request))

    @router.get("/rollouts/{rollout_id}", response_model=Optional[Union[AttemptedRollout, Rollout]])
    async def get_rollout_by_id(rollout_id: str) -> Response:
        """One rollout (with its latest attempt when it has one), or ``null``."""
        return _raw(await op_get_rollout_by_id(server, rollout_id))

    @router.post("/rollouts/{rollout_id}", response_model=Rollout)
    async def update_rollout(rollout_id: str, request: UpdateRolloutRequest) -> Response:
        """Update the fields present in the body (``null`` clears input/mode/resources_id/metadata)."""
        check_text(rollout_id, "rollout_id")
        _reject_nulls(request, ("status", "config"))
        rollout = await server.update_rollout(
            rollout_id,
            input=_provided(request, "input"),
            mode=_provided(request, "mode"),
            resources_id=_provided(request, "resources_id"),
            status=_provided(request, "status"),
            config=_provided(request, "config"),
            metadata=_provided(request, "metadata"),
        )
        return _json(rollout)

    # -- attempts ------------------------------------------------------------------------------------------------------
    @router.post("/rollouts/{rollout_id}/attempts", status_code=201, response_model=AttemptedRollout)
    async def start_attempt(rollout_id: str, request: Optional[StartAttemptRequest] = None) -> Response:
        """Start a new attempt of a rollout outside the queue; 201."""
        check_text(rollout_id, "rollout_id")
        worker_id = request.worker_id if request is not None else None
        return _json(await server.start_attempt(rollout_id, worker_id=worker_id), 201)

    @router.get("/rollouts/{rollout_id}/attempts", response_model=PaginatedResult[Attempt])
    async def query_attempts(
        rollout_id: str,
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> Response:
        """Attempts of a rollout (query parameters)."""
        check_text(rollout_id, "rollout_id")
        validate_pagination(Attempt, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        result = await server.query_attempts(
            rollout_id, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset
        )
        return _paginated(result)

    @router.post("/rollouts/{rollout_id}/attempts/search", response_model=PaginatedResult[Attempt])
    async def search_attempts(rollout_id: str, request: QueryAttemptsRequest) -> Response:
        """Attempts of a rollout (JSON body)."""
        return _raw(await op_query_attempts(server, rollout_id, request))

    @router.get("/rollouts/{rollout_id}/attempts/latest", response_model=Optional[Attempt])
    async def get_latest_attempt(rollout_id: str) -> Response:
        """The latest attempt of a rollout, or ``null``."""
        check_text(rollout_id, "rollout_id")
        return _json(await server.get_latest_attempt(rollout_id))

    @router.post("/rollouts/{rollout_id}/attempts/{attempt_id}", response_model=Attempt)
    async def update_attempt(rollout_id: str, attempt_id: str, request: UpdateAttemptRequest) -> Response:
        """Update an attempt (``latest`` allowed); fields present in the body only, no ``null`` values."""
        return _raw(await op_update_attempt(server, rollout_id, attempt_id, request))

    # -- workers -------------------------------------------------------------------------------------------------------
    @router.get("/workers", response_model=PaginatedResult[Worker])
    async def query_workers(
        status_in: Optional[List[WorkerStatus]] = Query(None),
        worker_id_contains: Optional[str] = None,
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        filter_logic: Literal["and", "or"] = "and",
    ) -> Response:
        """Query workers (query parameters)."""
        check_params(worker_id_contains=worker_id_contains)
        validate_pagination(
            Worker, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset, filter_logic=filter_logic
        )
        result = await server.query_workers(
            status_in=status_in,
            worker_id_contains=worker_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return _paginated(result)

    @router.post("/workers/search", response_model=PaginatedResult[Worker])
    async def search_workers(request: QueryWorkersRequest) -> Response:
        """Query workers (JSON body)."""
        validate_pagination(
            Worker,
            sort_by=request.sort_by,
            sort_order=request.sort_order,
            limit=request.limit,
            offset=request.offset,
            filter_logic=request.filter_logic,
        )
        result = await server.query_workers(
            status_in=request.status_in if "status_in" in request.model_fields_set else None,
            worker_id_contains=request.worker_id_contains,
            filter_logic=request.filter_logic,
            sort_by=request.sort_by,
            sort_order=request.sort_order,
            limit=request.limit,
            offset=request.offset,
        )
        return _paginated(result)

    @router.get("/workers/{worker_id}", response_model=Optional[Worker])
    async def get_worker(worker_id: str) -> Response:
        """One worker, or ``null``."""
        check_text(worker_id, "worker_id")
        return _json(await server.get_worker_by_id(worker_id))

    @router.post("/workers/{worker_id}", response_model=Worker)
    async def update_worker(worker_id: str, request: Optional[UpdateWorkerRequest] = None) -> Response:
        """Record a worker heartbeat, optionally with new ``heartbeat_stats``."""
        return _raw(await op_update_worker(server, worker_id, request))

    # -- statistics ----------------------------------------------------------------------------------------------------
    @router.get("/statistics")
    async def get_statistics() -> Response:
        """Store statistics."""
        return _json(dict(await server.statistics()))

    # -- resources -----------------------------------------------------------------------------------------------------
    @router.get("/resources", response_model=PaginatedResult[ResourcesUpdate])
    async def query_resources(
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> Response:
        """Query resource snapshots."""
        check_params(resources_id=resources_id, resources_id_contains=resources_id_contains)
        validate_pagination(ResourcesUpdate, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        result = await server.query_resources(
            resources_id=resources_id,
            resources_id_contains=resources_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return _paginated(result)

    @router.post("/resources", status_code=201, response_model=ResourcesUpdate)
    async def add_resources(resources: NamedResources = Body(...)) -> Response:
        """Store a new resources snapshot; 201."""
        return _raw(await op_add_resources(server, resources), 201)

    @router.get("/resources/latest", response_model=Optional[ResourcesUpdate])
    async def get_latest_resources() -> Response:
        """The latest resources snapshot, or ``null``."""
        return _raw(await op_get_latest_resources(server))

    @router.post("/resources/{resources_id}", response_model=ResourcesUpdate)
    async def update_resources(resources_id: str, resources: NamedResources = Body(...)) -> Response:
        """Create or update the snapshot with this id."""
        return _raw(await op_update_resources(server, resources_id, resources))

    @router.get("/resources/{resources_id}", response_model=Optional[ResourcesUpdate])
    async def get_resources_by_id(resources_id: str) -> Response:
        """One resources snapshot, or ``null``."""
        return _raw(await op_get_resources_by_id(server, resources_id))

    # -- spans ---------------------------------------------------------------------------------------------------------
    @router.post("/spans", status_code=201, response_model=Optional[Span])
    async def add_span(span: Span) -> Response:
        """Store one span; 201 with the span, or ``null`` for a duplicate."""
        return _raw(await op_add_span(server, span), 201)

    @router.get("/spans", response_model=PaginatedResult[Span])
    async def query_spans(
        rollout_id: str,
        attempt_id: Optional[str] = None,
        trace_id: Optional[str] = None,
        trace_id_contains: Optional[str] = None,
        span_id: Optional[str] = None,
        span_id_contains: Optional[str] = None,
        parent_id: Optional[str] = None,
        parent_id_contains: Optional[str] = None,
        name: Optional[str] = None,
        name_contains: Optional[str] = None,
        filter_logic: Literal["and", "or"] = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> Response:
        """Query the spans of a rollout (query parameters; ``rollout_id`` is required)."""
        request = QuerySpansRequest(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=trace_id,
            trace_id_contains=trace_id_contains,
            span_id=span_id,
            span_id_contains=span_id_contains,
            parent_id=parent_id,
            parent_id_contains=parent_id_contains,
            name=name,
            name_contains=name_contains,
            filter_logic=filter_logic,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )
        return _raw(await op_query_spans(server, request))

    @router.post("/spans/search", response_model=PaginatedResult[Span])
    async def search_spans(request: QuerySpansRequest) -> Response:
        """Query the spans of a rollout (JSON body)."""
        return _raw(await op_query_spans(server, request))

    @router.post("/spans/next", response_model=NextSequenceIdResponse)
    async def get_next_span_sequence_id(request: NextSequenceIdRequest) -> Response:
        """Allocate the next span sequence id of a rollout."""
        return _raw(await op_get_next_span_sequence_id(server, request))

    # -- waits ---------------------------------------------------------------------------------------------------------
    @router.post("/waits/rollouts", response_model=List[Rollout])
    async def wait_for_rollouts(request: WaitForRolloutsRequest) -> Response:
        """Wait up to ``timeout`` seconds for rollouts to finish; returns the finished ones."""
        return _raw(await op_wait_for_rollouts(server, request))

    return router
