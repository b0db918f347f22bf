"""Function-based agents: ``FunctionalLitAgent`` and the ``@rollout`` decorators."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from typing import Any, Awaitable, Callable, Dict, Optional, SupportsIndex, Tuple, TypeVar, Union, overload

from rollouthub.types.core import AttemptedRollout, Rollout, RolloutRawResult
from rollouthub.types.resources import LLM, NamedResources, PromptTemplate, ProxyLLM

from .litagent import LitAgent

__all__ = ["FunctionalLitAgent", "llm_rollout", "prompt_rollout", "rollout"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
RolloutFunc = Callable[..., Union[RolloutRawResult, Awaitable[RolloutRawResult]]]


class FunctionalLitAgent(LitAgent[T]):
    """A :class:`LitAgent` wrapping a plain (sync or async) rollout function.

    Resources are injected by parameter name: ``llm`` (the first ``LLM`` resource, proxies resolved to the current
    attempt when ``strip_proxy``), ``prompt_template`` (the first ``PromptTemplate``) and ``rollout`` (the rollout
    object). Calling the agent calls the wrapped function unchanged.
    """

    def __init__(self, rollout_func: RolloutFunc, *, strip_proxy: bool = True) -> None:
        """Wrap ``rollout_func``.

        Args:
            rollout_func: ``[async] f(task, llm|prompt_template[, rollout], ...)``.
            strip_proxy: Convert an injected ``ProxyLLM`` into a plain ``LLM`` routed to the current attempt.
        """
        super().__init__()
        self._rollout_func = rollout_func
        self._strip_proxy = strip_proxy
        self._is_async = inspect.iscoroutinefunction(rollout_func)
        self._signature = inspect.signature(rollout_func)
        functools.update_wrapper(self, rollout_func)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function unchanged."""
        return self._rollout_func(*args, **kwargs)

    def is_async(self) -> bool:
        """Whether the wrapped function is a coroutine function."""
        return self._is_async

    def __reduce_ex__(self, protocol: SupportsIndex) -> Union[str, Tuple[Any, ...]]:
        """Pickle a module-level decorated agent by reference (its name resolves to this very object), except in
        ``__main__``: another process's ``__main__`` is another module (a Ray worker's is Ray's own script), so the
        agent travels by value there (cloudpickle carries the function itself)."""
        module_name = getattr(self, "__module__", "") or ""
        module = sys.modules.get(module_name) if module_name != "__main__" else None
        target: Any = module
        for part in str(getattr(self, "__qualname__", "")).split("."):
            target = getattr(target, part, None)
        if target is self:
            return str(self.__qualname__)
        return super().__reduce_ex__(protocol)

    # -------------------------------------------------------------- resource injection

    def _first_resource(self, resources: NamedResources, cls: type, what: str) -> Any:
        matches = [(name, res) for name, res in resources.items() if isinstance(res, cls)]
        if not matches:
            raise ValueError(f"No {what} resource found in the provided resources: {list(resources)}")
        if len(matches) > 1:
            logger.warning(
                "Multiple %s resources found (%s); using the first one: %r.",
                what,
                [name for name, _ in matches],
                matches[0][0],
            )
        return matches[0][1]

    def _get_llm(self, resources: NamedResources, rollout: Rollout) -> LLM:
        llm: LLM = self._first_resource(resources, LLM, "LLM")
        if self._strip_proxy and isinstance(llm, ProxyLLM):
            if not isinstance(rollout, AttemptedRollout):
                raise ValueError("Stripping a ProxyLLM requires an AttemptedRollout (with the current attempt).")
            return llm.with_attempted_rollout(rollout)
        return llm

    def _injected_kwargs(self, resources: NamedResources, rollout: Rollout) -> Dict[str, Any]:
        parameters = self._signature.parameters
        kwargs: Dict[str, Any] = {}
        if "rollout" in parameters:
            kwargs["rollout"] = rollout
        if "llm" in parameters:
            kwargs["llm"] = self._get_llm(resources, rollout)
        if "prompt_template" in parameters:
            kwargs["prompt_template"] = self._first_resource(resources, PromptTemplate, "PromptTemplate")
        return kwargs

    # -------------------------------------------------------------- rollout methods

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Call the synchronous rollout function with injected resources.

        Raises:
            RuntimeError: If the wrapped function is async (use :meth:`rollout_async`).
        """
        if self._is_async:
            raise RuntimeError(f"{self._rollout_func!r} is an async function; call rollout_async() instead.")
        return self._rollout_func(task, **self._injected_kwargs(resources, rollout))  # type: ignore[return-value]

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Await the asynchronous rollout function with injected resources.

        Raises:
            RuntimeError: If the wrapped function is sync (use :meth:`rollout`).
        """
        if not self._is_async:
            raise RuntimeError(f"{self._rollout_func!r} is a sync function; call rollout() instead.")
        return await self._rollout_func(task, **self._injected_kwargs(resources, rollout))  # type: ignore[misc]


def _validate_signature(func: Callable[..., Any], resource_param: str) -> None:
    """Check ``func(task, <resource_param>, ...)``; raises ``ValueError`` describing the problem."""
    parameters = list(inspect.signature(func).parameters)
    name = getattr(func, "__name__", repr(func))
    if len(parameters) < 2:
        raise ValueError(f"Function {name} must have at least 2 parameters (task, {resource_param}), got {parameters}")
    if parameters[0] != "task":
        raise ValueError(f"The first parameter of {name} must be named 'task', got {parameters[0]!r}")
    if resource_param not in parameters:
        raise ValueError(f"Function {name} must have a parameter named {resource_param!r}, got {parameters}")


@overload
def llm_rollout(func: RolloutFunc, *, strip_proxy: bool = True) -> FunctionalLitAgent[Any]: ...


@overload
def llm_rollout(func: None = None, *, strip_proxy: bool = True) -> Callable[[RolloutFunc], FunctionalLitAgent[Any]]: ...


def llm_rollout(
    func: Optional[RolloutFunc] = None, *, strip_proxy: bool = True
) -> Union[FunctionalLitAgent[Any], Callable[[RolloutFunc], FunctionalLitAgent[Any]]]:
    """Turn ``[async] f(task, llm[, rollout])`` into an agent; usable as ``@llm_rollout`` or ``@llm_rollout(...)``.

    Raises:
        ValueError: If the signature has fewer than 2 parameters, the first is not ``task``, or no ``llm``.
    """

    def decorate(fn: RolloutFunc) -> FunctionalLitAgent[Any]:
        _validate_signature(fn, "llm")
        return FunctionalLitAgent(fn, strip_proxy=strip_proxy)

    if func is None:
        return decorate
    return decorate(func)


@overload
def prompt_rollout(func: RolloutFunc) -> FunctionalLitAgent[Any]: ...


@overload
def prompt_rollout(func: None = None) -> Callable[[RolloutFunc], FunctionalLitAgent[Any]]: ...


def prompt_rollout(
    func: Optional[RolloutFunc] = None,
) -> Union[FunctionalLitAgent[Any], Callable[[RolloutFunc], FunctionalLitAgent[Any]]]:
    """Turn ``[async] f(task, prompt_template[, rollout])`` into an agent (``@prompt_rollout`` or ``@prompt_rollout()``).

    Raises:
        ValueError: If the signature has fewer than 2 parameters, the first is not ``task``, or no
            ``prompt_template``.
    """

    def decorate(fn: RolloutFunc) -> FunctionalLitAgent[Any]:
        _validate_signature(fn, "prompt_template")
        return FunctionalLitAgent(fn)

    if func is None:
        return decorate
    return decorate(func)


def rollout(func: RolloutFunc) -> FunctionalLitAgent[Any]:
    """Turn a rollout function into an agent, accepting either the ``llm`` or the ``prompt_template`` signature.

    Raises:
        NotImplementedError: If the function matches neither ``(task, llm[, rollout])`` nor
            ``(task, prompt_template[, rollout])``.
    """
    try:
        _validate_signature(func, "llm")
        return FunctionalLitAgent(func)
    except ValueError:
        pass
    try:
        _validate_signature(func, "prompt_template")
        return FunctionalLitAgent(func)
    except ValueError:
        pass
    raise NotImplementedError(
        f"Function {getattr(func, '__name__', func)!r} has an unsupported signature "
        f"{inspect.signature(func)}. Expected (task, llm[, rollout]) or (task, prompt_template[, rollout])."
    )
