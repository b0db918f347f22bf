"""In-memory primitives: nested-dict collections, a deque queue and a dict key-value; the locks
are in :mod:`.memory_locks`."""

from __future__ import annotations

import copy
import operator
import types
import uuid
from collections import deque
from contextlib import AsyncExitStack, asynccontextmanager
from typing import (
    Any,
    AsyncIterator,
    Deque,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
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

from .base import (
    ALL_ATOMIC_LABELS,
    AtomicLabels,
    AtomicMode,
    Collection,
    DuplicatedPrimaryKeyError,
    FilterMap,
    KeyValue,
    LightningCollections,
    NormalizedFilter,
    Queue,
    ensure_numeric,
    model_with,
    normalize_filter_options,
    primary_key_of_filter,
    resolve_sort,
    tracked,
)
from .memory_locks import _LockScope, _LoopAwareAsyncLock, _NoLockScope, _ThreadSafeAsyncLock

__all__ = [
    "ListBasedCollection",
    "DequeBasedQueue",
    "DictBasedKeyValue",
    "InMemoryLightningCollections",
]

T = TypeVar("T", bound=BaseModel)
Q = TypeVar("Q")
K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()


# --------------------------------------------------------------------------------------------------------------
# Filter evaluation
# --------------------------------------------------------------------------------------------------------------


def _condition(value: Any, op: str, expected: Any) -> bool:
    if op == "exact":
        return bool(value == expected)
    if op == "within":
        try:
            return value in expected
        except TypeError:
            return False
    if op == "contains":
        if value is None:
            return False
        if isinstance(value, str) and isinstance(expected, str):
            return expected in value
        try:
            return expected in value
        except TypeError:
            return False
    raise ValueError(f"Unsupported filter operator '{op}'")


def _without_exact_conditions(filters: FilterMap, fields: Sequence[str]) -> FilterMap:
    """``filters`` minus the fields in ``fields`` whose only condition is ``exact``."""
    return {name: ops for name, ops in filters.items() if not (name in fields and len(ops) == 1 and "exact" in ops)}


def _all_conditions_hold(item: Any, filters: FilterMap) -> bool:
    for field_name, ops in filters.items():
        value = getattr(item, field_name, None)
        for op, expected in ops.items():
            if expected is None:
                continue
            if not _condition(value, op, expected):
                return False
    return True


def _item_matches_filters(
    item: Any,
    filters: Optional[FilterMap],
    filter_logic: Literal["and", "or"] = "and",
    must_filters: Optional[FilterMap] = None,
) -> bool:
    """Evaluate a filter on one item: ``must_filters`` all hold, then the pooled regular conditions."""
    if must_filters and not _all_conditions_hold(item, must_filters):
        return False
    if not filters:
        return True
    if filter_logic == "and":
        return _all_conditions_hold(item, filters)
    for field_name, ops in filters.items():
        value = getattr(item, field_name, None)
        for op, expected in ops.items():
            if expected is None:
                continue
            if _condition(value, op, expected):
                return True
    return False


# --------------------------------------------------------------------------------------------------------------
# Sorting
# --------------------------------------------------------------------------------------------------------------


def _zero_for_annotation(annotation: Any) -> Any:
    """A type-appropriate zero used in place of ``None`` when sorting."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:  # Optional[int] and int | None alike
        for arg in get_args(annotation):
            if arg is type(None):
                continue
            try:
                return _zero_for_annotation(arg)
            except ValueError:
                continue
        raise ValueError(f"Unsupported sort annotation {annotation!r}")
    if origin is Literal:
        return ""
    if annotation is str:
        return ""
    if annotation is bool or annotation is int:
        return 0
    if annotation is float:
        return 0.0
    raise ValueError(f"Cannot sort null values of a field annotated {annotation!r}")


def _sort_items(items: List[T], model: Type[BaseModel], name: str, order: str) -> List[T]:
    reverse = order == "desc"
    if name.endswith("_time"):
        inf = float("inf")

        def time_key(item: T) -> Any:
            value = getattr(item, name, None)
            return inf if value is None else value

        return sorted(items, key=time_key, reverse=reverse)
    zero: Any = _MISSING

    def key(item: T) -> Any:
        nonlocal zero
        value = getattr(item, name, None)
        if value is None:
            if zero is _MISSING:
                zero = _zero_for_annotation(model.model_fields[name].annotation)
            return zero
        return value

    return sorted(items, key=key, reverse=reverse)


# --------------------------------------------------------------------------------------------------------------
# Collection
# --------------------------------------------------------------------------------------------------------------


class ListBasedCollection(Collection[T]):
    """Items in a nested dict keyed by successive primary-key values: O(1) lookups and PK-prefix subtree scans."""

    def __init__(
        self,
        items: List[T],
        item_type: Type[T],
        primary_keys: Sequence[str],
        id: Optional[str] = None,
        tracker: Optional[MetricsBackend] = None,
    ) -> None:
        super().__init__(tracker=tracker)
        if not primary_keys:
            raise ValueError("primary_keys must be non-empty")
        if isinstance(item_type, type) and issubclass(item_type, dict):
            raise TypeError("ListBasedCollection item_type must not be a dict subclass")
        self._item_type = item_type
        self._primary_keys = tuple(primary_keys)
        self._key_getter = operator.attrgetter(*self._primary_keys)  # a value for one key, a tuple for several
        self._single_key = len(self._primary_keys) == 1
        self._id = id if id is not None else str(uuid.uuid4())
        self._root: Dict[Any, Any] = {}
        self._size = 0
        if items:
            self._insert_now(items)

    # -- metadata -------------------------------------------------------------------------------------------
    @property
    def collection_name(self) -> str:
        return self._id

    def primary_keys(self) -> Sequence[str]:
        """Primary-key field names."""
        return self._primary_keys

    def item_type(self) -> Type[T]:
        """Item model class."""
        return self._item_type

    def __repr__(self) -> str:
        return f"<{type(self).__name__}[{self._item_type.__name__}] ({self._size} items)>"

    # -- internals ------------------------------------------------------------------------------------------
    def _key_of(self, item: Any) -> Tuple[Any, ...]:
        return (self._key_getter(item),) if self._single_key else self._key_getter(item)  # type: ignore[no-any-return]

    def _check_type(self, item: Any) -> None:
        if not isinstance(item, self._item_type):
            raise TypeError(f"Expected item of type {self._item_type.__name__}, got {type(item).__name__}")

    def _lookup(self, key: Tuple[Any, ...]) -> Any:
        node: Any = self._root
        for part in key:
            if not isinstance(node, dict):
                return _MISSING
            node = node.get(part, _MISSING)
            if node is _MISSING:
                return _MISSING
        return node

    def _store(self, key: Tuple[Any, ...], item: T) -> None:
        node = self._root
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = item

    def _remove(self, key: Tuple[Any, ...]) -> None:
        path: List[Tuple[Dict[Any, Any], Any]] = []
        node = self._root
        for part in key[:-1]:
            path.append((node, part))
            node = node[part]
        del node[key[-1]]
        for parent, part in reversed(path):
            if parent[part]:
                break
            del parent[part]

    def _iter_items(
        self,
        root: Optional[Dict[Any, Any]] = None,
        filters: Optional[FilterMap] = None,
        must_filters: Optional[FilterMap] = None,
        filter_logic: Literal["and", "or"] = "and",
    ) -> Iterator[T]:
        """Walk a (sub)tree and yield the items matching the filters (the only tree walker)."""
        start = self._root if root is None else root
        stack: List[Any] = [start]
        matcher = _item_matches_filters
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                stack.extend(reversed(list(node.values())))
            elif matcher(node, filters, filter_logic, must_filters):
                yield node

    def _pinned_prefix(self, normalized: NormalizedFilter) -> Optional[List[Any]]:
        """PK values pinned by exact conditions that must hold; ``None`` when contradictory."""
        prefix: List[Any] = []
        for pk in self._primary_keys:
            values = normalized.exact_values(pk)
            if not values:
                break
            if any(v != values[0] for v in values[1:]):
                return None
            prefix.append(values[0])
        return prefix

    def _matching(self, normalized: NormalizedFilter) -> List[T]:
        regular = normalized.regular or None
        must = normalized.must or None
        prefix = self._pinned_prefix(normalized)
        if prefix is None:
            return []
        if len(prefix) == len(self._primary_keys):
            found = self._lookup(tuple(prefix))
            if found is _MISSING or isinstance(found, dict):
                return []
            return [found] if _item_matches_filters(found, regular, normalized.aggregate, must) else []
        root: Any = self._root
        if prefix:
            root = self._lookup(tuple(prefix))
            if root is _MISSING:
                return []
            # Every item under the pinned subtree has those key values: their exact conditions need no re-check.
            pinned = self._primary_keys[: len(prefix)]
            if must:
                must = _without_exact_conditions(must, pinned) or None
            if regular and normalized.aggregate == "and":
                regular = _without_exact_conditions(regular, pinned) or None
        return list(self._iter_items(root, regular, must, normalized.aggregate))

    def _insert_now(self, items: Sequence[T]) -> None:
        keys: List[Tuple[Any, ...]] = []
        seen: set[Tuple[Any, ...]] = set()
        for item in items:
            self._check_type(item)
            key = self._key_of(item)
            if key in seen:
                raise DuplicatedPrimaryKeyError(f"Duplicated primary key {key} in the inserted items")
            seen.add(key)
            keys.append(key)
        for key in keys:
            if self._lookup(key) is not _MISSING:
                raise DuplicatedPrimaryKeyError(f"Item with duplicated primary key {key} already exists")
        # All-or-nothing: nothing is stored when any key conflicts (the reference could store a prefix).
        for key, item in zip(keys, items, strict=False):
            self._store(key, item)
            self._size += 1

    def _missing_error(self, key: Tuple[Any, ...]) -> ValueError:
        desc = ", ".join(f"{pk}={value!r}" for pk, value in zip(self._primary_keys, key, strict=False))
        return ValueError(f"Item does not exist with primary key(s): {desc}")

    @staticmethod
    def _merge(existing: T, item: T, update_fields: Sequence[str]) -> T:
        """``existing`` with the ``update_fields`` of ``item`` (:func:`~.base.model_with`: the values are valid)."""
        if not isinstance(existing, BaseModel):
            raise TypeError("update_fields requires a Pydantic item type")
        return model_with(existing, {f: getattr(item, f) for f in update_fields})  # type: ignore[return-value]

    # -- operations -----------------------------------------------------------------------------------------
    @tracked("size")
    async def size(self) -> int:
        """Number of items."""
        return self._size

    @tracked("query")
    async def query(
        self,
        filter: Optional[FilterOptions] = None,
        sort: Optional[SortOptions] = None,
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[T]:
        """Filter, sort, paginate."""
        normalized = normalize_filter_options(filter)
        sort_spec = resolve_sort(self._item_type, sort)
        items = self._matching(normalized)
        if sort_spec is not None:
            items = _sort_items(items, self._item_type, *sort_spec)
        total = len(items)
        if limit == 0:
            page: List[T] = []
        elif limit < 0:
            page = items[offset:]
        else:
            page = items[offset : offset + limit]
        return PaginatedResult(items=page, limit=limit, offset=offset, total=total)

    @tracked("get")
    async def get(self, filter: Optional[FilterOptions] = None, sort: Optional[SortOptions] = None) -> Optional[T]:
        """First match, or ``None``."""
        if sort is None:
            key = primary_key_of_filter(filter, self._primary_keys)
            if key is not None:  # lookup by id: no normalisation, no tree walk
                found = self._lookup(key)
                return None if found is _MISSING or isinstance(found, dict) else found  # type: ignore[no-any-return]
        normalized = normalize_filter_options(filter)
        sort_spec = resolve_sort(self._item_type, sort)
        items = self._matching(normalized)
        if not items:
            return None
        if sort_spec is None:
            return items[0]
        name, order = sort_spec
        return _sort_items(items, self._item_type, name, order)[0]

    @tracked("insert")
    async def insert(self, items: Sequence[T]) -> None:
        """Insert new items (payload validated before mutating)."""
        self._insert_now(items)

    @tracked("update")
    async def update(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> Sequence[T]:
        """Replace existing items or copy ``update_fields`` onto them."""
        stored: List[T] = []
        for item in items:
            self._check_type(item)
            key = self._key_of(item)
            existing = self._lookup(key)
            if existing is _MISSING or isinstance(existing, dict):
                raise self._missing_error(key)
            new_item = item if update_fields is None else self._merge(existing, item, update_fields)
            self._store(key, new_item)
            stored.append(new_item)
        return stored

    @tracked("upsert")
    async def upsert(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> Sequence[T]:
        """Insert missing items; update existing ones per ``update_fields``."""
        stored: List[T] = []
        for item in items:
            self._check_type(item)
            key = self._key_of(item)
            existing = self._lookup(key)
            if existing is _MISSING:
                self._store(key, item)
                self._size += 1
                stored.append(item)
                continue
            new_item = item if update_fields is None else self._merge(existing, item, update_fields)
            self._store(key, new_item)
            stored.append(new_item)
        return stored

    @tracked("delete")
    async def delete(self, items: Sequence[T]) -> None:
        """Delete items by primary key."""
        keys = [self._key_of(item) for item in items]
        for key in keys:
            if self._lookup(key) is _MISSING:
                raise self._missing_error(key)
        for key in keys:
            self._remove(key)
            self._size -= 1

    def evict_subtree(self, prefix: Sequence[Any]) -> int:
        """Drop every item under a primary-key prefix; returns how many were dropped (size not adjusted)."""
        node = self._lookup(tuple(prefix))
        if node is _MISSING:
            return 0
        count = sum(1 for _ in self._iter_items(node)) if isinstance(node, dict) else 1
        self._remove(tuple(prefix))
        return count


class DequeBasedQueue(Queue[Q]):
    """A FIFO queue backed by a deque."""

    def __init__(
        self,
        item_type: Type[Q],
        items: Optional[Sequence[Q]] = None,
        id: Optional[str] = None,
        tracker: Optional[MetricsBackend] = None,
    ) -> None:
        super().__init__(tracker=tracker)
        self._item_type = item_type
        self._id = id if id is not None else str(uuid.uuid4())
        self._items: Deque[Q] = deque()
        if items:
            for item in items:
                self._check(item)
                self._items.append(item)

    @property
    def collection_name(self) -> str:
        return self._id

    def item_type(self) -> Type[Q]:
        """Type of queued values."""
        return self._item_type

    def _check(self, item: Any) -> None:
        if not isinstance(item, self._item_type):
            raise TypeError(f"Expected item of type {self._item_type.__name__}, got {type(item).__name__}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}[{self._item_type.__name__}] ({len(self._items)} items)>"

    @tracked("has")
    async def has(self, item: Q) -> bool:
        """Membership among queued items."""
        self._check(item)
        return item in self._items

    @tracked("enqueue")
    async def enqueue(self, items: Sequence[Q]) -> Sequence[Q]:
        """Append items."""
        for item in items:
            self._check(item)
        self._items.extend(items)
        return list(items)

    @tracked("dequeue")
    async def dequeue(self, limit: int = 1) -> Sequence[Q]:
        """Pop up to ``limit`` items from the head."""
        out: List[Q] = []
        while len(out) < limit and self._items:
            out.append(self._items.popleft())
        return out

    @tracked("peek")
    async def peek(self, limit: int = 1) -> Sequence[Q]:
        """First ``limit`` items without removing them."""
        if limit <= 0:
            return []
        return [self._items[i] for i in range(min(limit, len(self._items)))]

    @tracked("size")
    async def size(self) -> int:
        """Queue length."""
        return len(self._items)


class DictBasedKeyValue(KeyValue[K, V]):
    """A key-value store backed by a dict copy of the initial data."""

    def __init__(
        self, data: Optional[Mapping[K, V]] = None, id: Optional[str] = None, tracker: Optional[MetricsBackend] = None
    ) -> None:
        super().__init__(tracker=tracker)
        self._data: Dict[K, V] = dict(data) if data else {}
        self._id = id if id is not None else str(uuid.uuid4())

    @property
    def collection_name(self) -> str:
        return self._id

    @tracked("has")
    async def has(self, key: K) -> bool:
        """Whether the key exists."""
        return key in self._data

    @tracked("get")
    async def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Value or default."""
        return self._data.get(key, default)

    @tracked("set")
    async def set(self, key: K, value: V) -> None:
        """Store a value."""
        self._data[key] = value

    @tracked("inc")
    async def inc(self, key: K, amount: V) -> V:
        """Add ``amount`` and return the new value."""
        ensure_numeric(amount, description="amount")
        if key in self._data:
            current = self._data[key]
            ensure_numeric(current, description=f"value for key {key!r}")
            new_value: V = current + amount  # type: ignore[operator]
        else:
            new_value = amount
        self._data[key] = new_value
        return new_value

    @tracked("chmax")
    async def chmax(self, key: K, value: V) -> V:
        """Store and return ``max(existing, value)``."""
        ensure_numeric(value, description="value")
        if key in self._data:
            current = self._data[key]
            ensure_numeric(current, description=f"value for key {key!r}")
            if value > current:  # type: ignore[operator]
                self._data[key] = value
        else:
            self._data[key] = value
        return self._data[key]

    @tracked("pop")
    async def pop(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Remove and return a value."""
        return self._data.pop(key, default)

    @tracked("size")
    async def size(self) -> int:
        """Number of keys."""
        return len(self._data)


# --------------------------------------------------------------------------------------------------------------
# Bundle
# --------------------------------------------------------------------------------------------------------------


class InMemoryLightningCollections(LightningCollections):
    """The in-memory bundle: one lock per atomic label, acquired in sorted order; reads are lock-free."""

    def __init__(self, lock_type: Literal["thread", "asyncio"], tracker: Optional[MetricsBackend] = None) -> None:
        super().__init__(tracker=tracker)
        if lock_type not in ("thread", "asyncio"):
            raise ValueError(f"lock_type must be 'thread' or 'asyncio'; got {lock_type!r}")
        self._rollouts = ListBasedCollection([], Rollout, ["rollout_id"], id="rollouts", tracker=tracker)
        self._attempts = ListBasedCollection([], Attempt, ["rollout_id", "attempt_id"], id="attempts", tracker=tracker)
        self._spans = ListBasedCollection(
            [], Span, ["rollout_id", "attempt_id", "span_id"], id="spans", tracker=tracker
        )
        self._resources = ListBasedCollection([], ResourcesUpdate, ["resources_id"], id="resources", tracker=tracker)
        self._workers = ListBasedCollection([], Worker, ["worker_id"], id="workers", tracker=tracker)
        self._rollout_queue: DequeBasedQueue[str] = DequeBasedQueue(str, id="rollout_queue", tracker=tracker)
        self._span_sequence_ids: DictBasedKeyValue[str, int] = DictBasedKeyValue(
            id="span_sequence_ids", tracker=tracker
        )
        self._lock: Dict[str, Any] = {
            label: (_ThreadSafeAsyncLock() if lock_type == "thread" else _LoopAwareAsyncLock())
            for label in ALL_ATOMIC_LABELS
        }
        self._locks_by_labels: Dict[Tuple[Any, ...], Tuple[Any, ...]] = {}

    @property
    def rollouts(self) -> ListBasedCollection[Rollout]:
        return self._rollouts

    @property
    def attempts(self) -> ListBasedCollection[Attempt]:
        return self._attempts

    @property
    def spans(self) -> ListBasedCollection[Span]:
        return self._spans

    @property
    def resources(self) -> ListBasedCollection[ResourcesUpdate]:
        return self._resources

    @property
    def workers(self) -> ListBasedCollection[Worker]:
        return self._workers

    @property
    def rollout_queue(self) -> DequeBasedQueue[str]:
        return self._rollout_queue

    @property
    def span_sequence_ids(self) -> DictBasedKeyValue[str, int]:
        return self._span_sequence_ids

    def atomic(  # type: ignore[override]
        self,
        *,
        mode: AtomicMode = "rw",
        snapshot: bool = False,
        commit: bool = False,
        labels: Optional[Sequence[AtomicLabels]] = None,
        **kwargs: Any,
    ) -> Any:
        """Lock the labelled resources (all when none; none for plain reads) in sorted order."""
        if mode == "r" and not snapshot:
            return _NoLockScope(self)
        key = tuple(labels) if labels else ()
        locks = self._locks_by_labels.get(key)
        if locks is None:
            names = sorted(set(labels)) if labels else sorted(self._lock)
            locks = self._locks_by_labels[key] = tuple(self._lock[name] for name in names)
        if self._tracker is None:
            return _LockScope(self, locks)
        return self._tracked_atomic(sorted(set(labels)) if labels else sorted(self._lock))

    @asynccontextmanager
    async def _tracked_atomic(self, names: List[str]) -> AsyncIterator[InMemoryLightningCollections]:
        async with self.tracking_context("atomic", "router"):
            async with AsyncExitStack() as stack:
                for name in names:
                    async with self.tracking_context("lock", name):
                        await stack.enter_async_context(self._lock[name])
                yield self

    async def evict_spans_for_rollout(self, rollout_id: str) -> None:
        """Drop all spans of a rollout (the spans size counter is deliberately not decremented)."""
        async with self.tracking_context("evict_spans_for_rollout", "spans"):
            self._spans.evict_subtree([rollout_id])

    def __deepcopy__(self, memo: Dict[int, Any]) -> InMemoryLightningCollections:
        raise TypeError("InMemoryLightningCollections cannot be deep-copied")


_ = copy  # keep import for type checkers of subclasses
