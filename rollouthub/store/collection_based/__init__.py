"""``CollectionBasedLightningStore``: all store business logic, written once over the collections layer.

Backends (memory, SQL, MongoDB) only provide primitives and ``atomic()`` (see :mod:`..collection.base`); every rule
of the store contract and its status machines lives here, with the status transitions themselves as pure functions in
:mod:`rollouthub.store.utils`. The logic is split by concern, one mixin per module over the shared base
:class:`~.core.StoreCore` (collections, units, statistics, the ``tracked`` metrics decorator):

* :mod:`.rollouts` -- rollout creation, the queue (a dequeue pops the queue and creates the attempt in ONE unit),
  rollout and attempt reads, rollout updates;
* :mod:`.attempts` -- attempt updates with the rollout's derived status, status propagation (metrics, waking
  waiters, backend hooks), the watchdog that times out attempts without heartbeats;
* :mod:`.spans` -- spans and sequence ids; :mod:`.resources`; :mod:`.workers`;
* :mod:`.waits` -- a dequeue that waits for a rollout, ``wait_for_rollouts``.

Improvements over the reference that keep its behaviour visible to callers:

* a dequeue pops the queue and creates the attempt in ONE unit, and a status change into ``queuing``/``requeuing``
  re-enqueues inside the same unit that writes it, so a crash can never lose a queued rollout;
* ``wait_for_rollouts`` is event-driven (wakes up as soon as a rollout finishes) instead of polling;
* ``add_many_spans`` returns exactly the spans that were newly stored;
* ``query_spans(filter_logic="or")`` without optional filters returns every span of the scope.
"""

from __future__ import annotations

import time  # noqa: F401 - a name of the reference module (its tests patch ``collection_based.time.time``)

from ..collection.base import LightningCollections, get_current_store_methods
from .attempts import AttemptsMixin
from .core import COLLECTION_STORE_PUBLIC_METHODS, StoreCore, T_collections, _attach, healthcheck_before, tracked
from .resources import ResourcesMixin
from .rollouts import RolloutsMixin
from .spans import SpansMixin
from .waits import WaitsMixin
from .workers import WorkersMixin

__all__ = [
    "CollectionBasedLightningStore",
    "LightningCollections",
    "StoreCore",
    "tracked",
    "healthcheck_before",
    "get_current_store_methods",
    "COLLECTION_STORE_PUBLIC_METHODS",
    "COLLECTION_STORE_ALL_METHODS",
    "_attach",
]


class CollectionBasedLightningStore(
    RolloutsMixin[T_collections],
    AttemptsMixin[T_collections],
    SpansMixin[T_collections],
    ResourcesMixin[T_collections],
    WorkersMixin[T_collections],
    WaitsMixin[T_collections],
):
    """The reference business logic over a :class:`LightningCollections` bundle (the mixins, assembled)."""


COLLECTION_STORE_ALL_METHODS: frozenset[str] = frozenset(
    name for name in dir(CollectionBasedLightningStore) if not name.startswith("__")
)
"""Every attribute name of the class (the ``store_privmeth`` label domain)."""
