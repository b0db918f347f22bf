"""The REST routes of the store server under ``/v1/agl``, each declared once.

Each handler gets a :class:`~rollouthub.store.server.endpoint.Call` (validated body/query, path parameters) and calls
the server's delegating methods (``server.<method>``, i.e. ``server.store.<method>`` at request time). Responses are
serialized directly with ``pydantic_core.to_json`` (each item by its own model, so attempted rollouts keep their
``attempt``); the declared ``response_model`` documents the shape in the OpenAPI document.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Literal, Optional, Sequence, Type, Union

import pydantic_core
from pydantic import BaseModel, TypeAdapter
from starlette.exceptions import HTTPException

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
from rollouthub.types.queries import AttemptQuery, ResourcesQuery, RolloutQuery, WorkerQuery

from .. import wire
from ..base import UNSET, paginated_json
from ..collection.base import model_field_names, sort_field_problem
from ..domains import MAX_OFFSET, MAX_PAGE_SIZE, check_text, check_value
from ..wire import (
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
from .endpoint import Call
from .routing import REQUIRED, Query, Route

__all__ = ["api_routes", "check_params", "validate_pagination"]

_dump = pydantic_core.to_json
_dump_plain_rollouts = TypeAdapter(List[Rollout]).dump_json
_INF = float("inf")
_SORT_ORDER = Literal["asc", "desc"]
_FILTER_LOGIC = Literal["and", "or"]


def validate_pagination(
    model: Type[BaseModel],
    *,
    sort_by: Optional[str],
    sort_order: str,
    limit: int,
    offset: int,
    filter_logic: Optional[str] = None,
) -> None:
    """Validate paging in the reference's order (sort field, sort order, limit, offset, filter logic), raising
    ``HTTPException(400)`` on the first violation (plus the page-size and offset bounds of
    :mod:`rollouthub.store.domains`)."""
    if sort_by is not None:
        if sort_by not in model_field_names(model):
            allowed = ", ".join(model.model_fields)
            raise HTTPException(400, f"Invalid sort_by: {sort_by}, allowed fields are: {allowed}")
        # A field holding objects or lists has no order: the same 400 on every backend (the collections apply the
        # same rule to in-process callers).
        problem = sort_field_problem(model, sort_by)
        if problem is not None:
            raise HTTPException(400, f"Invalid sort_by: {sort_by}, {problem}")
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


def _pagination_of(model: Type[BaseModel], q: Any, filter_logic: bool = True) -> None:
    validate_pagination(
        model,
        sort_by=q.sort_by,
        sort_order=q.sort_order,
        limit=q.limit,
        offset=q.offset,
        filter_logic=q.filter_logic if filter_logic else None,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Handlers (their names are the operation names of the OpenAPI document, their docstrings its descriptions)
# ---------------------------------------------------------------------------------------------------------------------


async def health(call: Call) -> bytes:
    """Liveness probe; never requires authentication. With an instance id, ``{"status": "ok", "instance_id": ...}``."""
    instance_id = getattr(call.server, "instance_id", None)
    if instance_id is None:
        return b'{"status":"ok"}'
    return json.dumps({"status": "ok", "instance_id": instance_id}, separators=(",", ":")).encode()


async def enqueue_rollouts(call: Call) -> bytes:
    """Enqueue one or more rollouts; 201 with the rollouts in input order."""
    server, items = call.server, call.body.rollouts
    if not items:
        return b"[]"
    if len(items) == 1:
        item = items[0]
        rollout = await server.enqueue_rollout(
            input=item.input, mode=item.mode, resources_id=item.resources_id, config=item.config, metadata=item.metadata
        )
        return _dump([rollout])
    return _dump(list(await server.enqueue_many_rollouts(items)))


async def dequeue_rollouts(call: Call) -> bytes:
    """Claim up to ``limit`` queued rollouts (default 1) for ``worker_id``; with ``timeout`` (and ``limit`` 1), wait up
    to that many seconds (capped) for one to be queued. A client that disconnects while held is never given a claim."""
    request: Optional[DequeueManyRolloutsRequest] = call.body
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
    server = call.server
    if limit == 1:
        if timeout:
            wait = min(timeout, wire.MAX_DEQUEUE_WAIT_SECONDS)
            call.watch_disconnect()
            attempted = await server.dequeue_rollout_for_client(worker_id, wait, call.client_gone)
        else:
            attempted = await server.dequeue_rollout(worker_id=worker_id)
        return _dump([attempted]) if attempted is not None else b"[]"
    return _dump(list(await server.dequeue_many_rollouts(limit=limit, worker_id=worker_id)))


async def start_rollout(call: Call) -> bytes:
    """Create a rollout with its first attempt, bypassing the queue; 201."""
    request: RolloutRequest = call.body
    attempted = await call.server.start_rollout(
        input=request.input,
        mode=request.mode,
        resources_id=request.resources_id,
        config=request.config,
        metadata=request.metadata,
        worker_id=request.worker_id,
    )
    return _dump(attempted)


def _arguments(query_type: Type[BaseModel], source: Any, **given: Any) -> Dict[str, Any]:
    """The keyword arguments of a store query method: each field of its query object read from ``source`` (the
    validated query parameters or body), ``given`` ones as given."""
    return {name: given[name] if name in given else getattr(source, name) for name in query_type.model_fields}


async def _rollouts(call: Call, q: Any, status_in: Any, rollout_id_in: Any) -> bytes:
    _pagination_of(Rollout, q)
    result = await call.server.query_rollouts(
        **_arguments(RolloutQuery, q, status_in=status_in, rollout_id_in=rollout_id_in)
    )
    return paginated_json(result)


async def query_rollouts(call: Call) -> bytes:
    """Query rollouts with filters, sorting and pagination (query parameters)."""
    q = call.query
    check_params(rollout_id_in=q.rollout_id_in, rollout_id_contains=q.rollout_id_contains)
    return await _rollouts(call, q, q.status_in, q.rollout_id_in)


async def search_rollouts(call: Call) -> bytes:
    """Query rollouts (JSON body); ``status_in``/``rollout_id_in`` apply only when present."""
    request: QueryRolloutsRequest = call.body
    fields = request.model_fields_set
    status_in = request.status_in if "status_in" in fields else None
    return await _rollouts(call, request, status_in, request.rollout_id_in if "rollout_id_in" in fields else None)


async def get_rollout_by_id(call: Call) -> bytes:
    """One rollout (with its latest attempt when it has one), or ``null``."""
    (rollout_id,) = call.params
    check_text(rollout_id, "rollout_id")
    return _dump(await call.server.get_rollout_by_id(rollout_id))


async def update_rollout(call: Call) -> bytes:
    """Update the fields present in the body (``null`` clears input/mode/resources_id/metadata)."""
    (rollout_id,) = call.params
    request: UpdateRolloutRequest = call.body
    check_text(rollout_id, "rollout_id")
    _reject_nulls(request, ("status", "config"))
    rollout = await call.server.update_rollout(
        rollout_id,
        input=_provided(request, "input"),
        mode=_provided(request, "mode"),
        resources_id=_provided(request, "resources_id"),
        status=_provided(request, "status"),
        config=_provided(request, "config"),
        metadata=_provided(request, "metadata"),
    )
    return _dump(rollout)


async def start_attempt(call: Call) -> bytes:
    """Start a new attempt of a rollout outside the queue; 201."""
    (rollout_id,) = call.params
    check_text(rollout_id, "rollout_id")
    worker_id = call.body.worker_id if call.body is not None else None
    return _dump(await call.server.start_attempt(rollout_id, worker_id=worker_id))


async def _attempts(call: Call, q: Any) -> bytes:
    (rollout_id,) = call.params
    check_text(rollout_id, "rollout_id")
    _pagination_of(Attempt, q, filter_logic=False)
    result = await call.server.query_attempts(rollout_id, **_arguments(AttemptQuery, q))
    return paginated_json(result)


async def query_attempts(call: Call) -> bytes:
    """Attempts of a rollout (query parameters)."""
    return await _attempts(call, call.query)


async def search_attempts(call: Call) -> bytes:
    """Attempts of a rollout (JSON body)."""
    return await _attempts(call, call.body)


async def get_latest_attempt(call: Call) -> bytes:
    """The latest attempt of a rollout, or ``null``."""
    (rollout_id,) = call.params
    check_text(rollout_id, "rollout_id")
    return _dump(await call.server.get_latest_attempt(rollout_id))


async def update_attempt(call: Call) -> bytes:
    """Update an attempt (``latest`` allowed); fields present in the body only, no ``null`` values."""
    rollout_id, attempt_id = call.params
    request: UpdateAttemptRequest = call.body
    check_params(rollout_id=rollout_id, attempt_id=attempt_id)
    fields = request.model_fields_set
    if fields:
        _reject_nulls(request, ("status", "worker_id", "last_heartbeat_time", "metadata"))
    attempt = await call.server.update_attempt(
        rollout_id,
        attempt_id,
        status=request.status if "status" in fields else UNSET,
        worker_id=request.worker_id if "worker_id" in fields else UNSET,
        last_heartbeat_time=request.last_heartbeat_time if "last_heartbeat_time" in fields else UNSET,
        metadata=request.metadata if "metadata" in fields else UNSET,
    )
    return _dump(attempt)


async def _workers(call: Call, q: Any, status_in: Any) -> bytes:
    _pagination_of(Worker, q)
    result = await call.server.query_workers(**_arguments(WorkerQuery, q, status_in=status_in))
    return paginated_json(result)


async def query_workers(call: Call) -> bytes:
    """Query workers (query parameters)."""
    q = call.query
    check_params(worker_id_contains=q.worker_id_contains)
    return await _workers(call, q, q.status_in)


async def search_workers(call: Call) -> bytes:
    """Query workers (JSON body)."""
    request: QueryWorkersRequest = call.body
    return await _workers(call, request, request.status_in if "status_in" in request.model_fields_set else None)


async def get_worker(call: Call) -> bytes:
    """One worker, or ``null``."""
    (worker_id,) = call.params
    check_text(worker_id, "worker_id")
    return _dump(await call.server.get_worker_by_id(worker_id))


async def update_worker(call: Call) -> bytes:
    """Record a worker heartbeat, optionally with new ``heartbeat_stats``."""
    (worker_id,) = call.params
    check_text(worker_id, "worker_id")
    request: Optional[UpdateWorkerRequest] = call.body
    stats: Any = UNSET
    if request is not None and "heartbeat_stats" in request.model_fields_set:
        if request.heartbeat_stats is None:
            raise HTTPException(400, "heartbeat_stats is invalid; it cannot be a null value.")
        stats = request.heartbeat_stats
    return _dump(await call.server.update_worker(worker_id, heartbeat_stats=stats))


async def get_statistics(call: Call) -> bytes:
    """Store statistics."""
    return _dump(dict(await call.server.statistics()))


async def query_resources(call: Call) -> bytes:
    """Query resource snapshots."""
    q = call.query
    check_params(resources_id=q.resources_id, resources_id_contains=q.resources_id_contains)
    _pagination_of(ResourcesUpdate, q, filter_logic=False)
    result = await call.server.query_resources(**_arguments(ResourcesQuery, q))
    return paginated_json(result)


async def add_resources(call: Call) -> bytes:
    """Store a new resources snapshot; 201."""
    check_value(call.body)
    return _dump(await call.server.add_resources(call.body))


async def get_latest_resources(call: Call) -> bytes:
    """The latest resources snapshot, or ``null``."""
    return _dump(await call.server.get_latest_resources())


async def update_resources(call: Call) -> bytes:
    """Create or update the snapshot with this id."""
    (resources_id,) = call.params
    check_text(resources_id, "resources_id")
    check_value(call.body)
    return _dump(await call.server.update_resources(resources_id, call.body))


async def get_resources_by_id(call: Call) -> bytes:
    """One resources snapshot, or ``null``."""
    (resources_id,) = call.params
    check_text(resources_id, "resources_id")
    return _dump(await call.server.get_resources_by_id(resources_id))


async def add_span(call: Call) -> bytes:
    """Store one span; 201 with the span, or ``null`` for a duplicate."""
    check_value(call.body)
    stored = await call.server.add_span(call.body)
    return _dump(stored) if stored is not None else b"null"


async def _spans(call: Call, request: QuerySpansRequest) -> bytes:
    _pagination_of(Span, request)
    return await call.server.query_spans_json(  # type: ignore[no-any-return]
        request.rollout_id, request.attempt_id, **dict(request.query())
    )


async def query_spans(call: Call) -> bytes:
    """Query the spans of a rollout (query parameters; ``rollout_id`` is required)."""
    return await _spans(call, QuerySpansRequest(**call.query.model_dump()))


async def search_spans(call: Call) -> bytes:
    """Query the spans of a rollout (JSON body)."""
    return await _spans(call, call.body)


async def get_next_span_sequence_id(call: Call) -> bytes:
    """Allocate the next span sequence id of a rollout."""
    request: NextSequenceIdRequest = call.body
    sequence_id = await call.server.get_next_span_sequence_id(request.rollout_id, request.attempt_id)
    return _dump({"sequence_id": int(sequence_id)})


async def wait_for_rollouts(call: Call) -> bytes:
    """Wait up to ``timeout`` seconds for rollouts to finish; returns the finished ones."""
    request: WaitForRolloutsRequest = call.body
    timeout = request.timeout
    if timeout is not None and not (0 <= timeout < _INF):
        raise HTTPException(400, "timeout must be a finite, non-negative number of seconds (or null)")
    rollouts = await call.server.wait_for_rollouts(rollout_ids=request.rollout_ids, timeout=timeout)
    plain = [r if type(r) is Rollout else Rollout.model_validate(r.model_dump(exclude={"attempt"})) for r in rollouts]
    return _dump_plain_rollouts(plain)


# ---------------------------------------------------------------------------------------------------------------------
# The route table
# ---------------------------------------------------------------------------------------------------------------------


def _page_query(sort_by: Optional[str] = None, filter_logic: bool = True) -> Dict[str, Query]:
    query = {
        "limit": Query(int, -1),
        "offset": Query(int, 0),
        "sort_by": Query(Optional[str], sort_by),
        "sort_order": Query(_SORT_ORDER, "asc"),
    }
    if filter_logic:
        query["filter_logic"] = Query(_FILTER_LOGIC, "and")
    return query


_ROLLOUTS_QUERY = {
    "status_in": Query(Optional[List[RolloutStatus]]),
    "rollout_id_in": Query(Optional[List[str]]),
    "rollout_id_contains": Query(Optional[str]),
    **_page_query(),
}
_WORKERS_QUERY = {
    "status_in": Query(Optional[List[WorkerStatus]]),
    "worker_id_contains": Query(Optional[str]),
    **_page_query(),
}
_RESOURCES_QUERY = {
    "resources_id": Query(Optional[str]),
    "resources_id_contains": Query(Optional[str]),
    **_page_query(filter_logic=False),
}
_SPANS_QUERY = {
    "rollout_id": Query(str, REQUIRED),
    "attempt_id": Query(Optional[str]),
    "trace_id": Query(Optional[str]),
    "trace_id_contains": Query(Optional[str]),
    "span_id": Query(Optional[str]),
    "span_id_contains": Query(Optional[str]),
    "parent_id": Query(Optional[str]),
    "parent_id_contains": Query(Optional[str]),
    "name": Query(Optional[str]),
    "name_contains": Query(Optional[str]),
    "filter_logic": Query(_FILTER_LOGIC, "and"),
    "limit": Query(int, -1),
    "offset": Query(int, 0),
    "sort_by": Query(Optional[str], "sequence_id"),
    "sort_order": Query(_SORT_ORDER, "asc"),
}
_ROLLOUT_OR_ATTEMPTED = Union[AttemptedRollout, Rollout]


def api_routes(prefix: str = wire.API_V1_AGL_PREFIX) -> List[Route]:
    """The REST routes of the store under ``prefix``, in matching order."""
    p = prefix
    get, post = ["GET"], ["POST"]
    return [
        Route(get, f"{p}/health", health, public=True, response_model=Dict[str, str]),
        Route(post, f"{p}/queues/rollouts/enqueue", enqueue_rollouts, body=EnqueueManyRolloutsRequest,
              response_model=List[Rollout], status=201),
        Route(post, f"{p}/queues/rollouts/dequeue", dequeue_rollouts, body=Optional[DequeueManyRolloutsRequest],
              body_required=False, response_model=List[AttemptedRollout]),
        Route(post, f"{p}/rollouts", start_rollout, body=RolloutRequest, response_model=AttemptedRollout, status=201),
        Route(get, f"{p}/rollouts", query_rollouts, query=_ROLLOUTS_QUERY,
              response_model=PaginatedResult[_ROLLOUT_OR_ATTEMPTED]),
        Route(post, f"{p}/rollouts/search", search_rollouts, body=QueryRolloutsRequest,
              response_model=PaginatedResult[_ROLLOUT_OR_ATTEMPTED]),
        Route(get, f"{p}/rollouts/{{rollout_id}}", get_rollout_by_id,
              response_model=Optional[_ROLLOUT_OR_ATTEMPTED]),
        Route(post, f"{p}/rollouts/{{rollout_id}}", update_rollout, body=UpdateRolloutRequest, response_model=Rollout),
        Route(post, f"{p}/rollouts/{{rollout_id}}/attempts", start_attempt, body=Optional[StartAttemptRequest],
              body_required=False, response_model=AttemptedRollout, status=201),
        Route(get, f"{p}/rollouts/{{rollout_id}}/attempts", query_attempts,
              query=_page_query(sort_by="sequence_id", filter_logic=False), response_model=PaginatedResult[Attempt]),
        Route(post, f"{p}/rollouts/{{rollout_id}}/attempts/search", search_attempts, body=QueryAttemptsRequest,
              response_model=PaginatedResult[Attempt]),
        Route(get, f"{p}/rollouts/{{rollout_id}}/attempts/latest", get_latest_attempt,
              response_model=Optional[Attempt]),
        Route(post, f"{p}/rollouts/{{rollout_id}}/attempts/{{attempt_id}}", update_attempt,
              body=UpdateAttemptRequest, response_model=Attempt),
        Route(get, f"{p}/workers", query_workers, query=_WORKERS_QUERY, response_model=PaginatedResult[Worker]),
        Route(post, f"{p}/workers/search", search_workers, body=QueryWorkersRequest,
              response_model=PaginatedResult[Worker]),
        Route(get, f"{p}/workers/{{worker_id}}", get_worker, response_model=Optional[Worker]),
        Route(post, f"{p}/workers/{{worker_id}}", update_worker, body=Optional[UpdateWorkerRequest],
              body_required=False, response_model=Worker),
        Route(get, f"{p}/statistics", get_statistics),
        Route(get, f"{p}/resources", query_resources, query=_RESOURCES_QUERY,
              response_model=PaginatedResult[ResourcesUpdate]),
        Route(post, f"{p}/resources", add_resources, body=NamedResources, body_name="resources",
              response_model=ResourcesUpdate, status=201),
        Route(get, f"{p}/resources/latest", get_latest_resources, response_model=Optional[ResourcesUpdate]),
        Route(post, f"{p}/resources/{{resources_id}}", update_resources, body=NamedResources, body_name="resources",
              response_model=ResourcesUpdate),
        Route(get, f"{p}/resources/{{resources_id}}", get_resources_by_id, response_model=Optional[ResourcesUpdate]),
        Route(post, f"{p}/spans", add_span, body=Span, body_name="span", response_model=Optional[Span], status=201),
        Route(get, f"{p}/spans", query_spans, query=_SPANS_QUERY, response_model=PaginatedResult[Span]),
        Route(post, f"{p}/spans/search", search_spans, body=QuerySpansRequest, response_model=PaginatedResult[Span]),
        Route(post, f"{p}/spans/next", get_next_span_sequence_id, body=NextSequenceIdRequest,
              response_model=NextSequenceIdResponse),
        Route(post, f"{p}/waits/rollouts", wait_for_rollouts, body=WaitForRolloutsRequest,
              response_model=List[Rollout]),
    ]  # fmt: skip
