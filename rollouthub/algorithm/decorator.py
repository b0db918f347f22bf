"""``@algo``: turn a plain function into an :class:`Algorithm`."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, Dict, Optional, Union

from .base import Algorithm, Dataset

__all__ = ["algo", "FunctionalAlgorithm"]


class FunctionalAlgorithm(Algorithm):
    """An algorithm backed by a sync or async function whose parameters are injected by **name**.

    Recognised parameter names: ``store``, ``adapter``, ``llm_proxy``, ``initial_resources``, ``train_dataset``,
    ``val_dataset``. Calling the object calls the function unchanged.
    """

    def __init__(self, algorithm_func: Callable[..., Any]) -> None:
        """Wrap ``algorithm_func`` (metadata is copied with :func:`functools.update_wrapper`)."""
        self._algorithm_func = algorithm_func
        self._is_async = inspect.iscoroutinefunction(algorithm_func)
        self._sig = inspect.signature(algorithm_func)
        functools.update_wrapper(self, algorithm_func)  # type: ignore[arg-type]

    def is_async(self) -> bool:
        """Whether the wrapped function is a coroutine function."""
        return self._is_async

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function with the given arguments."""
        return self._algorithm_func(*args, **kwargs)

    def _named_params(self) -> Dict[str, inspect.Parameter]:
        return {
            name: p
            for name, p in self._sig.parameters.items()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        }

    def run(
        self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None
    ) -> Union[None, Awaitable[None]]:
        """Call the function with the resources it asks for; returns the coroutine for async functions."""
        params = self._named_params()
        kwargs: Dict[str, Any] = {}
        if "store" in params:
            kwargs["store"] = self.get_store()
        if "adapter" in params:
            kwargs["adapter"] = self.get_adapter()
        if "llm_proxy" in params:
            kwargs["llm_proxy"] = self.get_llm_proxy()
        if "initial_resources" in params:
            kwargs["initial_resources"] = self.get_initial_resources()
        if "train_dataset" in params:
            kwargs["train_dataset"] = train_dataset
        elif train_dataset is not None:
            raise TypeError(
                f"train_dataset is provided but the algorithm function {self._algorithm_func.__name__!r} "
                "has no 'train_dataset' parameter."
            )
        if "val_dataset" in params:
            kwargs["val_dataset"] = val_dataset
        elif val_dataset is not None:
            raise TypeError(
                f"val_dataset is provided but the algorithm function {self._algorithm_func.__name__!r} "
                "has no 'val_dataset' parameter."
            )
        return self._algorithm_func(**kwargs)


def algo(func: Callable[..., Any]) -> FunctionalAlgorithm:
    """Decorator: wrap ``func`` as a :class:`FunctionalAlgorithm`."""
    return FunctionalAlgorithm(func)
