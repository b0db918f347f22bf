"""The collections layer: storage primitives the business logic is written against.

A backend implements :class:`Collection`, :class:`Queue`, :class:`KeyValue` and :class:`LightningCollections`
(including ``atomic()``); everything else lives once in :mod:`rollouthub.store.collection_based`.

Filters and sorts are normalised here into a small structured form (:class:`NormalizedFilter`) so that each
backend can either evaluate it in Python (memory) or compile it to a query language (SQL, MongoDB).
"""

from __future__ import annotations

import contextvars
import functools
import time
import types
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from numbers import Real
from typing import (
    Annotated,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generic,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)

from pydantic import BaseModel

from rollouthub.types import (
    Attempt,
    FilterOptions,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    SortOptions,
    Span,
    Worker,
)
from rollouthub.utils.metrics import MetricsBackend

from ..utils import LATENCY_BUCKETS

__all__ = [
    "AtomicLabels",
    "AtomicMode",
    "Collection",
    "Queue",
    "KeyValue",
    "LightningCollections",
    "FilterOptions",
    "SortOptions",
    "PaginatedResult",
    "DuplicatedPrimaryKeyError",
    "TrackedCollection",
    "tracked",
    "primary_key_of_filter",
    "ensure_numeric",
    "normalize_filter_options",
    "merge_must_filters",
    "resolve_sort_options",
    "resolve_sort",
    "check_sort_field",
    "sort_field_problem",
    "sortable_field_names",
    "resolve_error_type",
    "FilterMap",
    "NormalizedFilter",
    "get_current_store_methods",
    "FILTER_OPERATORS",
    "PoppedRollout",
    "RolloutAttempts",
    "model_with",
]

AtomicMode = Literal["r", "w", "rw"]
AtomicLabels = Literal[
    "rollouts", "attempts", "spans", "resources", "workers", "rollout_queue", "span_sequence_ids", "generic"
]
ALL_ATOMIC_LABELS: Tuple[str, ...] = (
    "rollouts",
    "attempts",
    "spans",
    "resources",
    "workers",
    "rollout_queue",
    "span_sequence_ids",
    "generic",
)

T = TypeVar("T")
T_model = TypeVar("T_model", bound=BaseModel)
K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

FilterMap = Dict[str, Dict[str, Any]]
"""Field name -> {operator -> expected value}."""

FILTER_OPERATORS: Tuple[str, ...] = ("exact", "within", "contains")


class DuplicatedPrimaryKeyError(ValueError):
    """Raised when inserting an item whose primary key already exists (or twice in one payload)."""


# --------------------------------------------------------------------------------------------------------------
# Call-stack context (which store method is running) -- used as metric labels by collections.
# --------------------------------------------------------------------------------------------------------------

_current_public_method: contextvars.ContextVar[str] = contextvars.ContextVar(
    "rollouthub_store_pubmeth", default="unknown"
)
_current_private_method: contextvars.ContextVar[str] = contextvars.ContextVar(
    "rollouthub_store_privmeth", default="unknown"
)


def get_current_store_methods() -> Tuple[str, str]:
    """Return ``(outermost public store method, innermost store method)`` of the running call stack."""
    return _current_public_method.get(), _current_private_method.get()


# --------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------


def ensure_numeric(value: Any, *, description: str) -> float:
    """Return ``value`` if it is a real number (``bool`` rejected), else raise ``TypeError``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{description} must be numeric; got {type(value).__name__}: {value!r}")
    return cast(float, value)


def merge_must_filters(must: Any) -> FilterMap:
    """Merge ``_must`` (a mapping or a sequence of mappings) into one field -> operators map."""
    if must is None:
        return {}
    if isinstance(must, Mapping):
        entries: Sequence[Any] = [must]
    elif isinstance(must, (list, tuple)):
        entries = must
    else:
        raise TypeError(f"_must filters must be a mapping or a sequence of mappings; got {type(must).__name__}")
    merged: FilterMap = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise TypeError(f"Each _must filter entry must be a mapping; got {type(entry).__name__}")
        for field_name, ops in entry.items():
            if not isinstance(ops, Mapping):
                raise TypeError(f"Filter for field '{field_name}' must be a mapping of operators")
            target = merged.setdefault(field_name, {})
            for op, expected in ops.items():
                if op in target:
                    raise ValueError(f"Duplicate operator '{op}' for field '{field_name}' in _must filters")
                target[op] = expected
    return merged


@dataclass
class NormalizedFilter:
    """A validated filter: ``must`` conditions (always ANDed) and ``regular`` conditions pooled by ``aggregate``."""

    must: FilterMap = field(default_factory=dict)
    regular: FilterMap = field(default_factory=dict)
    aggregate: Literal["and", "or"] = "and"

    @property
    def is_empty(self) -> bool:
        """True when the filter matches everything."""
        return not self.must and not self.regular

    def exact_values(self, field_name: str) -> List[Any]:
        """Exact values pinned for ``field_name`` by conditions that must all hold (``_must``, or regular under AND)."""
        values: List[Any] = []
        for source in (self.must, self.regular if self.aggregate == "and" else {}):
            ops = source.get(field_name)
            if ops is not None and ops.get("exact") is not None:
                values.append(ops["exact"])
        return values


def _validate_ops(filters: FilterMap) -> None:
    for field_name, ops in filters.items():
        for op in ops:
            if op not in FILTER_OPERATORS:
                raise ValueError(f"Unsupported filter operator '{op}' for field '{field_name}'")


def normalize_filter_options(filter: Optional[FilterOptions]) -> NormalizedFilter:
    """Validate and split a :data:`FilterOptions` mapping."""
    if not filter:
        return NormalizedFilter()
    aggregate = filter.get("_aggregate", "and")
    if aggregate not in ("and", "or"):
        raise ValueError(f"Unsupported filter aggregate '{aggregate}'")
    must = merge_must_filters(filter.get("_must"))
    regular: FilterMap = {}
    for key, ops in filter.items():
        if key in ("_aggregate", "_must"):
            continue
        if not isinstance(ops, Mapping):
            raise TypeError(f"Filter for field '{key}' must be a mapping of operators")
        regular[key] = dict(ops)
    _validate_ops(must)
    _validate_ops(regular)
    return NormalizedFilter(must=must, regular=regular, aggregate=aggregate)


def primary_key_of_filter(filter: Optional[FilterOptions], primary_keys: Sequence[str]) -> Optional[Tuple[str, ...]]:
    """The key tuple when ``filter`` is exactly a lookup by primary key, else ``None``.

    Recognised (the by-id reads of the business logic): every primary-key field with one ``exact`` string value
    and no other condition, written either as regular conditions (``{"rollout_id": {"exact": "ro-1"}}``, any
    ``_aggregate`` when there is one key, ``and`` otherwise) or as ``_must`` conditions. Backends use it to skip
    filter normalisation and compilation for the most frequent read; anything else takes the general path, which
    gives the same result.
    """
    if not filter:
        return None
    source: Any = filter
    n_conditions = len(filter)
    if "_must" in filter:
        source = filter["_must"]
        if n_conditions != 1 or type(source) is not dict:
            return None
        n_conditions = len(source)
    elif "_aggregate" in filter:
        # With a single key AND and OR agree; with several, only AND is a key lookup.
        if filter["_aggregate"] not in ("and", "or") or (len(primary_keys) > 1 and filter["_aggregate"] != "and"):
            return None
        n_conditions -= 1
    if n_conditions != len(primary_keys):
        return None
    key: List[str] = []
    for name in primary_keys:
        ops = source.get(name)
        if type(ops) is not dict or len(ops) != 1:
            return None
        value = ops.get("exact")
        if type(value) is not str:
            return None
        key.append(value)
    return tuple(key)


def resolve_sort_options(sort: Optional[SortOptions]) -> Optional[Tuple[str, Literal["asc", "desc"]]]:
    """Validate sort options; returns ``(field, order)`` or ``None`` for unsorted."""
    if not sort:
        return None
    name = sort.get("name")
    if not name:
        raise ValueError("Sort options must include a 'name' field")
    order = sort.get("order", "asc")
    if order not in ("asc", "desc"):
        raise ValueError(f"Sort order must be 'asc' or 'desc'; got {order!r}")
    return name, order  # type: ignore[return-value]


def model_with(existing: T_model, update: Dict[str, Any]) -> T_model:
    """A shallow copy of ``existing`` with some fields replaced by values that are already valid (not validated
    again); the replaced fields join the copy's set fields (``model_fields_set``)."""
    return existing.model_copy(update=update)


@functools.cache
def model_field_names(model: Type[BaseModel]) -> frozenset[str]:
    """The declared field names of a model class (cached: pydantic's ``model_fields`` is a computed property)."""
    return frozenset(model.model_fields)


_ORDERED_TYPES = (str, int, float, bool)
"""The scalar types whose values every backend orders the same way (SQL columns and Python comparisons agree)."""


def _has_order(annotation: Any) -> bool:
    """Whether values of a field annotated ``annotation`` have an order: a scalar (``str``, ``int``, ``float``,
    ``bool``), a ``Literal`` of scalars of one type, or one of those made ``Optional``. Objects, lists, ``Any`` and
    unions of several types have none (memory cannot compare them, SQL would compare their JSON text)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _has_order(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(members) == 1 and _has_order(members[0])
    if origin is Literal:
        return len({type(value) for value in get_args(annotation)}) == 1 and all(
            type(value) in _ORDERED_TYPES for value in get_args(annotation)
        )
    return annotation in _ORDERED_TYPES


@functools.cache
def sortable_field_names(model: Type[BaseModel]) -> Tuple[str, ...]:
    """The fields of ``model`` that items can be sorted by (see :func:`_has_order`), in declaration order."""
    return tuple(name for name, info in model.model_fields.items() if _has_order(info.annotation))


@functools.cache
def _sortable_field_set(model: Type[BaseModel]) -> frozenset[str]:
    return frozenset(sortable_field_names(model))


def sort_field_problem(model: Type[BaseModel], name: str) -> Optional[str]:
    """Why items of ``model`` cannot be sorted by ``name`` (a field that does not exist, or holds objects or lists),
    or ``None`` when they can. The one rule of every backend, the in-process API and the HTTP server alike."""
    if name not in model_field_names(model):
        return f"field does not exist on {model.__name__}"
    if name not in _sortable_field_set(model):
        sortable = ", ".join(sortable_field_names(model))
        return f"field has no order on {model.__name__} (it holds objects, lists or mixed values); sortable fields are: {sortable}"
    return None


def check_sort_field(model: Type[BaseModel], name: str) -> None:
    """Raise ``ValueError`` when items of ``model`` cannot be sorted by ``name`` (:func:`sort_field_problem`)."""
    problem = sort_field_problem(model, name)
    if problem is not None:
        raise ValueError(f"Failed to sort items by '{name}': {problem}")


def resolve_sort(model: Type[BaseModel], sort: Optional[SortOptions]) -> Optional[Tuple[str, Literal["asc", "desc"]]]:
    """:func:`resolve_sort_options` for a collection of ``model`` items: also checks the field
    (:func:`check_sort_field`), before any item is read."""
    resolved = resolve_sort_options(sort)
    if resolved is not None:
        check_sort_field(model, resolved[0])
    return resolved


def resolve_error_type(exc: BaseException) -> str:
    """The ``status`` label for a failed operation: the exception class name."""
    return type(exc).__name__


# --------------------------------------------------------------------------------------------------------------
# Tracking
# --------------------------------------------------------------------------------------------------------------


class TrackedCollection:
    """Base of every primitive: optional metrics of each operation (``agl.collections.*``)."""

    def __init__(self, tracker: Optional[MetricsBackend] = None) -> None:
        self._tracker = tracker

    @property
    def tracker(self) -> Optional[MetricsBackend]:
        """The metrics backend, if any."""
        return self._tracker

    @property
    def collection_name(self) -> str:
        """Identifier used as the ``collection`` metric label."""
        return type(self).__name__

    @property
    def extra_tracking_labels(self) -> Dict[str, str]:
        """Extra labels added to every collection metric (e.g. ``database`` for MongoDB)."""
        return {}

    @asynccontextmanager
    async def tracking_context(self, operation: str, collection: str) -> AsyncIterator[None]:
        """Measure the enclosed block as ``operation`` on ``collection`` when a tracker is set."""
        tracker = self._tracker
        if tracker is None:
            yield
            return
        start = time.perf_counter()
        status = "OK"
        try:
            yield
        except BaseException as exc:
            status = resolve_error_type(exc)
            raise
        finally:
            pub, priv = get_current_store_methods()
            labels = {
                "store_pubmeth": pub,
                "operation": operation,
                "collection": collection,
                "store_privmeth": priv,
                "status": status,
                **self.extra_tracking_labels,
            }
            await tracker.inc_counter("agl.collections.total", labels=labels)
            await tracker.observe_histogram("agl.collections.latency", time.perf_counter() - start, labels=labels)


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def tracked(operation: str) -> Callable[[F], F]:
    """Decorate a primitive's async method so it is measured as ``operation`` (free when no tracker is set)."""

    def decorator(func: F) -> F:
        @functools.wraps(func)
        async def wrapper(self: TrackedCollection, *args: Any, **kwargs: Any) -> Any:
            if self._tracker is None:
                return await func(self, *args, **kwargs)
            async with self.tracking_context(operation, self.collection_name):
                return await func(self, *args, **kwargs)

        return cast(F, wrapper)

    return decorator


# --------------------------------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------------------------------


class Collection(TrackedCollection, Generic[T_model]):
    """A keyed collection of Pydantic items identified by a tuple of primary-key field values."""

    def primary_keys(self) -> Sequence[str]:
        """Primary-key field names, in order."""
        raise NotImplementedError()

    def item_type(self) -> Type[T_model]:
        """The model class of the items."""
        raise NotImplementedError()

    async def size(self) -> int:
        """Number of items."""
        raise NotImplementedError()

    async def query(
        self,
        filter: Optional[FilterOptions] = None,
        sort: Optional[SortOptions] = None,
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[T_model]:
        """Filter, sort, then paginate (``limit=-1``: all). ``total`` counts all matches."""
        raise NotImplementedError()

    async def get(
        self, filter: Optional[FilterOptions] = None, sort: Optional[SortOptions] = None
    ) -> Optional[T_model]:
        """First match (with sort: min for asc, max for desc), or ``None``."""
        result = await self.query(filter=filter, sort=sort, limit=1)
        return result.items[0] if result.items else None

    async def insert(self, items: Sequence[T_model]) -> None:
        """Insert new items; an existing or repeated primary key raises :class:`DuplicatedPrimaryKeyError`."""
        raise NotImplementedError()

    async def update(
        self, items: Sequence[T_model], update_fields: Optional[Sequence[str]] = None
    ) -> Sequence[T_model]:
        """Replace existing items (or only ``update_fields``); returns the stored items."""
        raise NotImplementedError()

    async def upsert(
        self, items: Sequence[T_model], update_fields: Optional[Sequence[str]] = None
    ) -> Sequence[T_model]:
        """Insert missing items; update existing ones (all fields, only ``update_fields``, or none for ``[]``)."""
        raise NotImplementedError()

    async def delete(self, items: Sequence[T_model]) -> None:
        """Delete items by primary key; a missing key raises ``ValueError``."""
        raise NotImplementedError()

    async def write_update(self, items: Sequence[T_model], update_fields: Optional[Sequence[str]] = None) -> None:
        """:meth:`update` for a caller that does not need the stored items: a backend may then send the write with
        the unit's other writes when the unit ends (the PostgreSQL fast path). A missing item fails the unit with
        ``ValueError`` all the same (at the latest when the unit ends)."""
        await self.update(items, update_fields)

    async def write_upsert(self, items: Sequence[T_model], update_fields: Optional[Sequence[str]] = None) -> None:
        """:meth:`upsert` for a caller that does not need the stored items (see :meth:`write_update`)."""
        await self.upsert(items, update_fields)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}[{self.item_type().__name__}]>"


class Queue(TrackedCollection, Generic[T]):
    """A FIFO queue."""

    def item_type(self) -> Type[T]:
        """Type of the queued values."""
        raise NotImplementedError()

    async def has(self, item: T) -> bool:
        """Whether ``item`` is among the not-yet-dequeued items."""
        raise NotImplementedError()

    async def enqueue(self, items: Sequence[T]) -> Sequence[T]:
        """Append items in order; returns them."""
        raise NotImplementedError()

    async def dequeue(self, limit: int = 1) -> Sequence[T]:
        """Pop up to ``limit`` items from the head (``limit <= 0`` -> ``[]``)."""
        raise NotImplementedError()

    async def peek(self, limit: int = 1) -> Sequence[T]:
        """Like :meth:`dequeue` without removing."""
        raise NotImplementedError()

    async def size(self) -> int:
        """Number of queued items."""
        raise NotImplementedError()


class KeyValue(TrackedCollection, Generic[K, V]):
    """A dictionary with atomic numeric updates."""

    async def has(self, key: K) -> bool:
        """Whether ``key`` is present."""
        raise NotImplementedError()

    async def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Value of ``key`` or ``default``."""
        raise NotImplementedError()

    async def set(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``."""
        raise NotImplementedError()

    async def inc(self, key: K, amount: V) -> V:
        """Add ``amount`` (missing key -> ``amount``) and return the new value."""
        raise NotImplementedError()

    async def chmax(self, key: K, value: V) -> V:
        """Store ``max(existing, value)`` (missing key -> ``value``) and return the stored value."""
        raise NotImplementedError()

    async def raise_to(self, key: K, value: V) -> None:
        """Make the stored value at least ``value`` (missing key -> ``value``), writing only when it must -- so that
        callers which usually find the value already high enough do not contend on the key (rollouthub extension).
        Same argument checks as :meth:`chmax`. This default reads, then calls :meth:`chmax` when needed."""
        ensure_numeric(value, description="value")
        current = await self.get(key)
        if current is None or current < value:  # type: ignore[operator]
            await self.chmax(key, value)

    async def pop(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Remove ``key`` and return its value, or ``default``."""
        raise NotImplementedError()

    async def size(self) -> int:
        """Number of keys."""
        raise NotImplementedError()


class PoppedRollout(NamedTuple):
    """One id popped by :meth:`LightningCollections.dequeue_rollouts`, with what the claim needs to know."""

    rollout_id: str
    rollout: Optional[Any]
    """The stored rollout (``None`` when it no longer exists)."""
    attempt_count: int
    """How many attempts the rollout has."""


class RolloutAttempts(NamedTuple):
    """What :meth:`LightningCollections.get_rollout_and_attempts` read."""

    rollout: Optional[Any]
    """The rollout (``None`` when it does not exist; the other fields are then ``None`` too)."""
    latest: Optional[Any]
    """Its attempt with the highest ``sequence_id`` (``None`` when it has none)."""
    attempt: Optional[Any]
    """The attempt asked for (``None`` when none was asked for or it does not exist)."""


_LATEST_ATTEMPT_FIRST: SortOptions = {"name": "sequence_id", "order": "desc"}
_LATEST_RESOURCES_FIRST: SortOptions = {"name": "update_time", "order": "desc"}


class LightningCollections(TrackedCollection):
    """The bundle of primitives a store needs, plus atomic units over them.

    Besides the primitives, two *compound* operations read what the business logic needs at once (defaults here,
    written with the primitives; a backend may answer them with one statement -- PostgreSQL does, see
    ``docs/sql-backend.md``): :meth:`dequeue_rollouts`, :meth:`get_rollout_and_attempts` and
    :meth:`latest_resources`.
    """

    def __init__(self, tracker: Optional[MetricsBackend] = None, extra_labels: Optional[Sequence[str]] = None) -> None:
        super().__init__(tracker=tracker)
        if tracker is not None:
            label_names = [
                "store_pubmeth",
                "operation",
                "collection",
                "store_privmeth",
                "status",
                *(extra_labels or []),
            ]
            tracker.register_counter("agl.collections.total", label_names, group_level=2)
            tracker.register_histogram("agl.collections.latency", label_names, buckets=LATENCY_BUCKETS, group_level=2)

    @property
    def collection_name(self) -> str:
        return "router"

    @property
    def rollouts(self) -> Collection[Rollout]:
        """Rollouts (PK ``rollout_id``)."""
        raise NotImplementedError()

    @property
    def attempts(self) -> Collection[Attempt]:
        """Attempts (PK ``rollout_id``, ``attempt_id``)."""
        raise NotImplementedError()

    @property
    def spans(self) -> Collection[Span]:
        """Spans (PK ``rollout_id``, ``attempt_id``, ``span_id``)."""
        raise NotImplementedError()

    @property
    def resources(self) -> Collection[ResourcesUpdate]:
        """Resource snapshots (PK ``resources_id``)."""
        raise NotImplementedError()

    @property
    def workers(self) -> Collection[Worker]:
        """Workers (PK ``worker_id``)."""
        raise NotImplementedError()

    @property
    def rollout_queue(self) -> Queue[str]:
        """Queue of rollout ids."""
        raise NotImplementedError()

    @property
    def span_sequence_ids(self) -> KeyValue[str, int]:
        """Rollout id -> last issued span sequence id."""
        raise NotImplementedError()

    async def dequeue_rollouts(self, limit: int) -> List[PoppedRollout]:
        """Compound: pop up to ``limit`` ids from :attr:`rollout_queue` and read, for each (in the order popped), the
        stored rollout and its number of attempts. Meant to run inside the write unit that claims them."""
        out: List[PoppedRollout] = []
        for rollout_id in await self.rollout_queue.dequeue(limit):
            rollout = await self.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            count = 0
            if rollout is not None:
                count = (
                    await self.attempts.query(filter={"_must": {"rollout_id": {"exact": rollout_id}}}, limit=0)
                ).total
            out.append(PoppedRollout(rollout_id, rollout, count))
        return out

    async def latest_resources(self) -> Optional[Any]:
        """Compound: the resource snapshot with the greatest ``update_time`` (``None`` when there is none). Inside a
        write unit a backend may answer from a cache, provided the unit's writes only happen if the answer is still
        right (PostgreSQL validates it in the unit's write statement)."""
        return await self.resources.get(sort=_LATEST_RESOURCES_FIRST)

    async def get_rollout_and_attempts(self, rollout_id: str, attempt_id: Optional[str] = None) -> RolloutAttempts:
        """Compound: a rollout, its latest attempt (highest ``sequence_id``) and the attempt ``attempt_id`` (when
        given), read together."""
        rollout = await self.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
        if rollout is None:
            return RolloutAttempts(None, None, None)
        attempts = (
            await self.attempts.query(
                filter={"_must": {"rollout_id": {"exact": rollout_id}}}, sort=_LATEST_ATTEMPT_FIRST
            )
        ).items
        attempt = None
        if attempt_id is not None:
            attempt = next((a for a in attempts if a.attempt_id == attempt_id), None)
        return RolloutAttempts(rollout, attempts[0] if attempts else None, attempt)

    def atomic(
        self,
        *,
        mode: AtomicMode = "rw",
        snapshot: bool = False,
        commit: bool = False,
        labels: Optional[Sequence[AtomicLabels]] = None,
        **kwargs: Any,
    ) -> AbstractAsyncContextManager[LightningCollections]:
        """Async context manager yielding a collections object bound to one atomic unit.

        The arguments are hints: ``mode`` (read/write intent), ``snapshot`` (repeatable reads), ``commit``
        (all-or-nothing), ``labels`` (the logical resources touched; ``"generic"`` for coordination).
        """
        raise NotImplementedError()

    async def execute(
        self,
        callback: Callable[[LightningCollections], Awaitable[R]],
        *,
        mode: AtomicMode = "rw",
        snapshot: bool = False,
        commit: bool = False,
        labels: Optional[Sequence[AtomicLabels]] = None,
        **kwargs: Any,
    ) -> R:
        """Run ``callback(collections)`` inside an atomic unit and return its result."""
        async with self.atomic(mode=mode, snapshot=snapshot, commit=commit, labels=labels, **kwargs) as collections:
            return await callback(collections)

    async def close(self) -> None:
        """Release backend resources (connections, files)."""
        return None
