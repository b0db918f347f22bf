"""Building components from specs: instances, classes, factories, import strings, dicts."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, Mapping, Optional, Type, TypeVar, Union

__all__ = ["build_component", "instantiate_component", "instantiate_from_spec", "load_class", "OptionalDefaults"]

T = TypeVar("T")

OptionalDefaults = Mapping[str, Union[Any, Callable[[], Any]]]
"""Keyword arguments injected into a constructor when it accepts them and the spec did not provide them; callables
are called to produce the value."""


def load_class(path: str) -> Any:
    """Import ``"pkg.module.Name"`` and return the attribute ``Name``."""
    if "." not in path:
        raise ValueError(f"Invalid import path {path!r}: expected 'module.ClassName'.")
    module_name, _, attr = path.rpartition(".")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ImportError(f"Module {module_name!r} has no attribute {attr!r}.") from exc


def _init_parameters(cls: type) -> set[str]:
    """Names of the named ``__init__`` parameters of ``cls`` (``**kwargs`` does not count)."""
    try:
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
    except (TypeError, ValueError):
        return set()
    names: set[str] = set()
    for name, param in sig.parameters.items():
        if param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(name)
    names.discard("self")
    return names


def instantiate_component(
    cls: Type[T], provided_kwargs: Optional[Dict[str, Any]] = None, optional_defaults: Optional[OptionalDefaults] = None
) -> T:
    """Instantiate ``cls`` with ``provided_kwargs`` plus the optional defaults its ``__init__`` accepts.

    An optional default is added only when its name is not provided and is a named parameter of ``cls.__init__``;
    callable defaults are called to produce the value.
    """
    kwargs: Dict[str, Any] = dict(provided_kwargs or {})
    if optional_defaults:
        accepted = _init_parameters(cls)
        for name, value in optional_defaults.items():
            if name in kwargs:
                continue
            if name not in accepted:
                continue
            kwargs[name] = value() if callable(value) else value
    return cls(**kwargs)


def instantiate_from_spec(
    spec: str,
    *,
    provided_kwargs: Optional[Dict[str, Any]] = None,
    optional_defaults: Optional[OptionalDefaults] = None,
    registry: Optional[Mapping[str, str]] = None,
) -> Any:
    """Resolve ``spec`` through ``registry`` (falling back to the string itself), import it and instantiate it."""
    path = registry.get(spec, spec) if registry is not None else spec
    cls = load_class(path)
    return instantiate_component(cls, provided_kwargs, optional_defaults)


def _type_error(obj: Any, expected_type: type, spec_name: str, fmt: Optional[str]) -> TypeError:
    type_name = type(obj).__name__
    if fmt is not None:
        return TypeError(fmt.format(type_name=type_name, expected_type=expected_type.__name__, spec_name=spec_name))
    return TypeError(f"{spec_name} must be an instance of {expected_type.__name__}, got {type_name}.")


def _checked(obj: Any, expected_type: type, spec_name: str, fmt: Optional[str]) -> Any:
    if not isinstance(obj, expected_type):
        raise _type_error(obj, expected_type, spec_name, fmt)
    return obj


def build_component(
    spec: Any,
    *,
    expected_type: Type[T],
    spec_name: str,
    default_factory: Optional[Callable[[], T]] = None,
    allow_none: bool = False,
    optional_defaults: Optional[OptionalDefaults] = None,
    dict_requires_type: bool = True,
    dict_default_cls: Optional[type] = None,
    type_error_fmt: Optional[str] = None,
    invalid_spec_error_fmt: Optional[str] = None,
    registry: Optional[Mapping[str, str]] = None,
) -> Optional[T]:
    """Build a component of ``expected_type`` from a spec.

    Accepted specs: an instance (returned as-is); ``None`` (``default_factory()``, else ``None`` when
    ``allow_none``, else ``ValueError``); a subclass of ``expected_type`` (instantiated with the optional
    defaults); any other callable (called with no argument); an import string or registry alias; a dict with a
    ``type`` key (or ``name`` resolved through the registry, or ``dict_default_cls`` when
    ``dict_requires_type=False``) whose other keys are constructor arguments. Type mismatches raise
    ``TypeError``; anything else raises ``ValueError``.
    """
    if isinstance(spec, expected_type):
        return spec
    if spec is None:
        if default_factory is not None:
            return _checked(default_factory(), expected_type, spec_name, type_error_fmt)
        if allow_none:
            return None
        raise ValueError(f"{spec_name} must be provided.")
    if isinstance(spec, type):
        if issubclass(spec, expected_type):
            return instantiate_component(spec, None, optional_defaults)
        raise _type_error(spec, expected_type, spec_name, type_error_fmt)
    if callable(spec):
        return _checked(spec(), expected_type, spec_name, type_error_fmt)
    if isinstance(spec, str):
        obj = instantiate_from_spec(spec, optional_defaults=optional_defaults, registry=registry)
        return _checked(obj, expected_type, spec_name, type_error_fmt)
    if isinstance(spec, dict):
        kwargs: Dict[str, Any] = dict(spec)
        type_spec = kwargs.pop("type", None)
        if type_spec is None and registry is not None and "name" in kwargs and kwargs["name"] in registry:
            type_spec = registry[kwargs.pop("name")]
        elif type_spec is not None and registry is not None and isinstance(type_spec, str):
            type_spec = registry.get(type_spec, type_spec)
        if type_spec is None:
            if dict_requires_type:
                raise ValueError(f"{spec_name} dict must contain a 'type' key.")
            if dict_default_cls is None:
                raise ValueError(f"{spec_name} dict has no 'type' key and no default class is configured.")
            cls: Any = dict_default_cls
        elif isinstance(type_spec, str):
            cls = load_class(type_spec)
        elif isinstance(type_spec, type):
            cls = type_spec
        else:
            raise ValueError(f"{spec_name} dict has an invalid 'type': {type_spec!r}.")
        obj = instantiate_component(cls, kwargs, optional_defaults)
        return _checked(obj, expected_type, spec_name, type_error_fmt)
    if invalid_spec_error_fmt is not None:
        raise ValueError(
            invalid_spec_error_fmt.format(
                type_name=type(spec).__name__, expected_type=expected_type.__name__, spec_name=spec_name
            )
        )
    raise ValueError(f"Invalid {spec_name} spec of type {type(spec).__name__}: {spec!r}.")
