"""The :class:`Algorithm` base class."""

from __future__ import annotations

import inspect
import weakref
from typing import TYPE_CHECKING, Any, Awaitable, Optional, Union

from rollouthub.store.base import LightningStore
from rollouthub.types import NamedResources

try:  # ``Dataset`` belongs to rollouthub.types.core; fall back until it lands there.
    from rollouthub.types.core import Dataset  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    from typing import Protocol, TypeVar

    _T_co = TypeVar("_T_co", covariant=True)

    class Dataset(Protocol[_T_co]):  # type: ignore[no-redef]
        """Anything indexable with a length (plain lists qualify)."""

        def __getitem__(self, index: int) -> _T_co: ...

        def __len__(self) -> int: ...


if TYPE_CHECKING:  # pragma: no cover
    from rollouthub.llm_proxy import LLMProxy

__all__ = ["Algorithm", "Dataset"]


class Algorithm:
    """Base class of every algorithm: the component that enqueues rollouts and learns from their traces.

    An algorithm is wired by the trainer (or by hand) with a store, an adapter, an optional LLM proxy and the
    initial resources, then :meth:`run` is called with the datasets. References to the trainer, the adapter and
    the LLM proxy are weak so that an algorithm never keeps them alive; the store is held strongly.
    """

    _trainer_ref: Optional[weakref.ReferenceType[Any]] = None
    _adapter_ref: Optional[weakref.ReferenceType[Any]] = None
    _llm_proxy_ref: Optional[weakref.ReferenceType[Any]] = None
    _store: Optional[LightningStore] = None
    _initial_resources: Optional[NamedResources] = None

    def is_async(self) -> bool:
        """Whether :meth:`run` is a coroutine function."""
        return inspect.iscoroutinefunction(self.run)

    # The trainer is typed ``Any``: the trainer module imports this one, so naming ``Trainer`` here would make the two
    # modules import each other (even if only for type checking).
    def set_trainer(self, trainer: Any) -> None:
        """Remember the ``Trainer`` that drives this algorithm (weak reference)."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """Return the ``Trainer``; ``ValueError`` if it was never set or has been garbage-collected."""
        if self._trainer_ref is None:
            raise ValueError("Trainer has not been set for this algorithm.")
        trainer = self._trainer_ref()
        if trainer is None:
            raise ValueError("Trainer reference is no longer valid (object has been garbage collected).")
        return trainer

    @property
    def trainer(self) -> Any:
        """The trainer (see :meth:`get_trainer`)."""
        return self.get_trainer()

    def set_store(self, store: LightningStore) -> None:
        """Set the store used by the algorithm (strong reference; usually the strategy's wrapper)."""
        self._store = store

    def get_store(self) -> LightningStore:
        """Return the store; ``ValueError`` if unset."""
        if self._store is None:
            raise ValueError("Store has not been set for this algorithm.")
        return self._store

    def set_adapter(self, adapter: Any) -> None:
        """Remember the trace adapter (weak reference)."""
        self._adapter_ref = weakref.ref(adapter)

    def get_adapter(self) -> Any:
        """Return the adapter; ``ValueError`` if unset or garbage-collected."""
        if self._adapter_ref is None:
            raise ValueError("Adapter has not been set for this algorithm.")
        adapter = self._adapter_ref()
        if adapter is None:
            raise ValueError("Adapter reference is no longer valid (object has been garbage collected).")
        return adapter

    def set_llm_proxy(self, llm_proxy: Optional[LLMProxy]) -> None:
        """Remember the LLM proxy (weak reference); ``None`` clears it."""
        self._llm_proxy_ref = weakref.ref(llm_proxy) if llm_proxy is not None else None

    def get_llm_proxy(self) -> Optional[LLMProxy]:
        """Return the LLM proxy, ``None`` if never set; ``ValueError`` if it has been garbage-collected."""
        if self._llm_proxy_ref is None:
            return None
        proxy = self._llm_proxy_ref()
        if proxy is None:
            raise ValueError("LLM proxy reference is no longer valid (object has been garbage collected).")
        return proxy

    def set_initial_resources(self, resources: NamedResources) -> None:
        """Set the resources the algorithm starts from (e.g. the seed prompt)."""
        self._initial_resources = resources

    def get_initial_resources(self) -> Optional[NamedResources]:
        """Return the initial resources, or ``None``."""
        return self._initial_resources

    def run(
        self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None
    ) -> Union[None, Awaitable[None]]:
        """The algorithm body; subclasses override it (sync or async)."""
        raise NotImplementedError("Subclasses must implement run().")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Alias of :meth:`run`."""
        return self.run(*args, **kwargs)

    def get_client(self) -> Any:
        """Deprecated v0.1 accessor; always raises ``NotImplementedError``."""
        raise NotImplementedError("get_client() is deprecated; algorithms talk to the store (get_store()).")
